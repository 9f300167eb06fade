"""`interlingua train` and `interlingua tune`: Ray Train over the prepared dataset.

driver.py      train(): the stage cache, MLflow run, TorchTrainer, export of the best model
folders.py     Ray Train's storage under train/: its folder (one per lease holder), resume point, clean-up
builders.py    config -> the model's and the loop's flat arguments, checked before any work
loop.py        train_loop_per_worker: set-up, step, dev evaluation, checkpoint (on every worker)
checkpoint.py  what a checkpoint holds, how it is written, restored and exported
window.py      the sums between two progress lines: loss, tokens/s, CPU use
tune.py        interlingua tune: Ray Tune trials, each one training run
"""
