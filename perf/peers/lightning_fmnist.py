#!/usr/bin/python3
"""Lightning's side of the time-to-accuracy comparison: the pytorch/examples
MNIST CNN on Fashion-MNIST through pytorch_lightning.Trainer, with the data,
normalisation, batch, Adadelta learning rate and StepLR(1, gamma) that
kdp-train and torch_fmnist.py use; the test set is the validation set, checked
after every epoch, and EarlyStopping(stopping_threshold=--target) ends the run
after the epoch that reaches it.

    lightning_fmnist.py [--epochs 8] [--batch-size 64] [--lr 1.0] [--gamma 0.7]
                        [--target 0.91] [--processes P] [--threads N] [--seed 0] [--dir DIR]

With --processes P > 1 Lightning trains with its "ddp" strategy on P CPU
processes (gloo), each on --batch-size / P samples of every global batch.

Prints one JSON object: the test accuracy after each epoch, the epoch that
reached the target (null: not reached), the Lightning and torch versions.
The caller times the whole process (wall time from launch).
"""
import argparse
import json
import sys

from torch_cnn import examples
from torch_fmnist import load_data, parse_run_args


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--gamma", type=float, default=0.7)
    ap.add_argument("--target", type=float, default=0.91)
    args = parse_run_args(ap)
    try:
        import pytorch_lightning as pl
        import torch
        from pytorch_lightning.callbacks import EarlyStopping
    except ImportError as e:
        print(json.dumps({"error": f"Lightning is not installed (pytorch-lightning): {e}"}))
        return 3
    torch.set_num_threads(args.threads)
    pl.seed_everything(args.seed, verbose=False)
    x_train, y_train, x_test, y_test = load_data(args.dir)
    x_train, x_test = x_train.reshape(-1, 1, 28, 28), x_test.reshape(-1, 1, 28, 28)
    data = torch.utils.data
    train = data.DataLoader(data.TensorDataset(x_train, y_train),
                            batch_size=args.batch_size // args.processes, shuffle=True)
    test = data.DataLoader(data.TensorDataset(x_test, y_test), batch_size=1000)
    accuracies = []

    class Classifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = examples(torch.nn)

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch, _):
            x, y = batch
            correct = (self.net(x).argmax(1) == y).float().mean()
            self.log("val_acc", correct, on_epoch=True, batch_size=len(y), sync_dist=True)

        def on_validation_epoch_end(self):
            if not self.trainer.sanity_checking:
                accuracies.append(float(self.trainer.callback_metrics["val_acc"]))

        def configure_optimizers(self):
            opt = torch.optim.Adadelta(self.parameters(), lr=args.lr)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=args.gamma)]

    stop = EarlyStopping(monitor="val_acc", mode="max", stopping_threshold=args.target,
                         patience=args.epochs)
    trainer = pl.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=args.processes,
                         strategy="ddp" if args.processes > 1 else "auto", callbacks=[stop],
                         precision="bf16-mixed" if args.precision == "bf16" else "32-true",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(Classifier(), train, test)
    rank = trainer.global_rank
    # The process group is taken down before the interpreter exits: left to
    # the exit handlers, gloo's threads abort the process.
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    if rank != 0:
        return 0
    reached = next((i + 1 for i, a in enumerate(accuracies) if a >= args.target), None)
    print(json.dumps({"model": "cnn", "processes": args.processes, "threads": args.threads, "batch_size": args.batch_size,
                      "lr": args.lr, "target": args.target, "precision": args.precision,
                      "epochs": [{"epoch": i + 1, "test_accuracy": a} for i, a in enumerate(accuracies)],
                      "epoch_reaching_target": reached, "lightning": pl.__version__,
                      "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
