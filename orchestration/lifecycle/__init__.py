"""The life of a model after training: `interlingua run` and `interlingua compare`.

run.py        prepare -> train -> evaluate -> register, each stage skipped when up to date, exit codes
champion.py   register the challenger, re-evaluate the champion on the same data, promote or not
compare.py    the runs of an experiment side by side (tables, learning curves, matrix differences)
"""
