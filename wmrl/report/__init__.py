"""wmrl.report"""
