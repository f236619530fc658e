"""wmrl.training"""
