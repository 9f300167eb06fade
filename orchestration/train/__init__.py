"""`interlingua train` and `interlingua tune`: Ray Train over the prepared dataset.

driver.py      train(): the stage cache, MLflow run, TorchTrainer, export of the best model
train_dir.py   the training directory: which of its entries are the product's, what --force removes
folders.py     Ray Train's storage under train/: its folder (one per lease holder), resume point, clean-up
builders.py    config -> the model's and the loop's flat arguments, checked before any work
loop.py        train_loop_per_worker: step, dev evaluation, checkpoint (on every worker)
worker.py      a worker's state and its set-up: model, optimizer, stream, resumed from a checkpoint
checkpoint.py  what a checkpoint holds, how it is written, restored and exported
window.py      the sums between two progress lines: loss, tokens/s, CPU use
tune.py        interlingua tune: Ray Tune trials, each one training run
"""
