"""wmrl.sim"""
