"""The embodied track: WMRL post-training of a language-conditioned robot policy in simulation.

Meta-World (v3, Gymnasium) environments with seeded and held-out initial states (:mod:`.env`), a
Gaussian action policy behaviour-cloned from the scripted experts (:mod:`.policy`), a learned progress
predictor as the world model (:mod:`.progress`), the Meta-World environment of the step engine
(:mod:`.environment`), the trainer on the step engine and the run kit, in the text track's run-directory layout
(:mod:`.trainer`), the bench (:mod:`.bench`), the CLI
(:mod:`.cli`, ``wmrl embodied``) and a LIBERO adapter (:mod:`.libero`). See docs/embodied.md.
"""
