"""Learn to continue sine waves with a two-layer LSTM.

A set of sine waves with random phases is generated; the network reads each wave one
sample at a time and learns to predict the next sample. After training it is asked to
continue a held-out wave for ``--future`` steps past its end, and the predicted
continuation is written to ``--output``.

    python sine_wave.py --epochs 50 --future 200
"""

import argparse
import math

import torch
import torch.nn as nn

parser = argparse.ArgumentParser(description="Sine wave sequence prediction")
parser.add_argument("--epochs", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--hidden", type=int, default=48, help="LSTM cell size")
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--num-waves", type=int, default=64, help="training waves")
parser.add_argument("--length", type=int, default=50, help="samples per wave")
parser.add_argument("--period", type=float, default=20.0, help="period in samples")
parser.add_argument("--future", type=int, default=100, help="steps predicted past the end")
parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
parser.add_argument("--threads", type=int, default=None)
parser.add_argument("--seed", type=int, default=2)
parser.add_argument("--output", default="predictions.txt", help="where predictions go")
args = parser.parse_args()

torch.manual_seed(args.seed)
if args.threads:
    torch.set_num_threads(args.threads)
device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))

# num_waves training waves plus one held-out test wave, each with a random phase
phase = torch.rand(args.num_waves + 1, 1) * 2 * math.pi
steps = torch.arange(args.length, dtype=torch.float32)
waves = torch.sin(steps * (2 * math.pi / args.period) + phase).float()

# the target is the input shifted by one sample
train_input = waves[:-1, :-1].to(device)
train_target = waves[:-1, 1:].to(device)
test_input = waves[-1:, :-1].to(device)
test_target = waves[-1:, 1:].to(device)


class Sequence(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, input, future=0):
        batch = input.size(0)
        h1 = input.new_zeros(batch, self.hidden)
        c1 = input.new_zeros(batch, self.hidden)
        h2 = input.new_zeros(batch, self.hidden)
        c2 = input.new_zeros(batch, self.hidden)

        outputs = []
        for value in input.split(1, dim=1):
            h1, c1 = self.lstm1(value, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            output = self.linear(h2)
            outputs.append(output)
        # keep going past the end, feeding each prediction back in
        for _ in range(future):
            h1, c1 = self.lstm1(output, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            output = self.linear(h2)
            outputs.append(output)
        return torch.cat(outputs, dim=1)


def train(model, optimizer, inputs, targets, epoch):
    model.train()
    criterion = nn.MSELoss()
    losses = []
    for i in range(0, inputs.size(0), args.batch_size):
        input = inputs[i : i + args.batch_size]
        target = targets[i : i + args.batch_size]
        optimizer.zero_grad()
        out = model(input)
        loss = criterion(out, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)


model = Sequence(args.hidden).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

epoch_loss = float("nan")
for epoch in range(args.epochs):
    epoch_loss = train(model, optimizer, train_input, train_target, epoch)
    print(f"epoch {epoch}: loss {epoch_loss:.6f}")

model.eval()
with torch.no_grad():
    pred = model(test_input, future=args.future)
    test_loss = nn.functional.mse_loss(pred[:, : test_target.size(1)], test_target).item()
print(f"test loss {test_loss:.6f}")
print(f"final loss {epoch_loss:.6f}")

with open(args.output, "w") as f:
    for value in pred[0, test_input.size(1) :].tolist():
        f.write(f"{value:.6f}\n")
print(f"wrote {args.future} predicted values to {args.output}")
