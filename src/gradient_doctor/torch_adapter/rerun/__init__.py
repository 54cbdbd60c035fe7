"""The seeded rerun of `gradient-doctor run`: the script run again in another process, its
failing step recorded there and handed back as op events.
"""
