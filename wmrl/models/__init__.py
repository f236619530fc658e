"""wmrl.models"""
