"""wmrl.execution"""
