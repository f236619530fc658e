"""wmrl.core"""
