"""wmrl.tasks"""
