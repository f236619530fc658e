"""wmrl: World Model RL for post-training AutoResearch agents.

Packages (data flows one way, left to right):
    tasks -> models (policy samples) -> core.routing -> (execution | models.world_model)
    -> core.calibration -> core.advantages -> core.fusion -> training (update, log, checkpoint)

``core`` holds pure functions on tensors and arrays and imports nothing else from wmrl.
``training`` wires the parts together through the protocols in :mod:`wmrl.interfaces`;
nothing imports ``training`` except the CLI.
"""

__version__ = "0.1.0"
