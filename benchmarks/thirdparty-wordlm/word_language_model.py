"""Word-level language modelling with an LSTM.

Reads a plain text file (``<data>/train.txt``), turns it into a stream of word ids,
cuts the stream into ``batch_size`` columns and trains a recurrent language model on
``bptt``-long windows with truncated backpropagation through time.

    python word_language_model.py --data ./data --epochs 2
"""

import argparse
import math
import os
import time
from collections import Counter

import torch
import torch.nn as nn


class Dictionary:
    """Maps words to integer ids and back."""

    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus:
    """The training text as one long tensor of word ids (``<eos>`` ends every line).

    With ``max_vocab``, only the most frequent words keep their own id; the others
    become ``<unk>``.
    """

    def __init__(self, path, max_vocab=None):
        self.dictionary = Dictionary()
        self.train = self.tokenize(os.path.join(path, "train.txt"), max_vocab)

    def tokenize(self, path, max_vocab):
        with open(path, encoding="utf8") as f:
            lines = [line.split() + ["<eos>"] for line in f]

        if max_vocab:
            counts = Counter(word for words in lines for word in words)
            keep = {word for word, _ in counts.most_common(max_vocab - 1)}
            lines = [[w if w in keep else "<unk>" for w in words] for words in lines]

        ids = []
        for words in lines:
            for word in words:
                ids.append(self.dictionary.add_word(word))
        return torch.tensor(ids, dtype=torch.long)


def batchify(data, bsz):
    """Cut the id stream into ``bsz`` equal columns; shape (length, bsz)."""
    nbatch = data.size(0) // bsz
    data = data[: nbatch * bsz]
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt):
    """Rows ``i .. i+bptt`` as input, the same rows shifted by one as target."""
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].reshape(-1)
    return data, target


def repackage_hidden(h):
    """Cut the graph behind the hidden state so backprop stops at the window."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


class LSTMModel(nn.Module):
    """Embedding -> multi-layer LSTM -> linear decoder over the vocabulary."""

    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.2, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.nhid = nhid
        self.nlayers = nlayers
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout if nlayers > 1 else 0.0)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("--tied needs --emsize equal to --nhid")
            self.decoder.weight = self.encoder.weight
        self.init_weights()

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        return decoded, hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (
            weight.new_zeros(self.nlayers, bsz, self.nhid),
            weight.new_zeros(self.nlayers, bsz, self.nhid),
        )


def train(model, train_data, criterion, optimizer, epoch, args):
    model.train()
    ntokens = model.ntoken
    total_loss = 0.0
    epoch_loss = 0.0
    nbatches = 0
    start_time = time.time()
    hidden = model.init_hidden(args.batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i, args.bptt)
        hidden = repackage_hidden(hidden)
        optimizer.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output.view(-1, ntokens), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()

        step_loss = loss.item()
        total_loss += step_loss
        epoch_loss += step_loss
        nbatches += 1
        if args.log_interval and batch % args.log_interval == 0 and batch > 0:
            cur_loss = total_loss / args.log_interval
            elapsed = time.time() - start_time
            print(
                f"| epoch {epoch:3d} | {batch:5d}/{len(train_data) // args.bptt:5d} batches "
                f"| lr {args.lr:02.2f} | ms/batch {elapsed * 1000 / args.log_interval:6.2f} "
                f"| loss {cur_loss:5.2f} | ppl {math.exp(min(cur_loss, 50)):8.2f}"
            )
            total_loss = 0.0
            start_time = time.time()
    return epoch_loss / max(nbatches, 1)


def main():
    parser = argparse.ArgumentParser(description="LSTM word-level language model")
    parser.add_argument("--data", default="./data", help="folder holding train.txt")
    parser.add_argument("--emsize", type=int, default=200, help="size of word embeddings")
    parser.add_argument("--nhid", type=int, default=200, help="hidden units per layer")
    parser.add_argument("--nlayers", type=int, default=2, help="number of LSTM layers")
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--tied", action="store_true", help="tie encoder and decoder weights")
    parser.add_argument("--lr", type=float, default=20.0, help="learning rate")
    parser.add_argument("--clip", type=float, default=0.25, help="gradient clipping norm")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=20, metavar="N")
    parser.add_argument("--bptt", type=int, default=35, help="sequence length")
    parser.add_argument("--max-vocab", type=int, default=None, help="keep the N most frequent")
    parser.add_argument("--seed", type=int, default=1111)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--log-interval", type=int, default=0, help="batches between log lines")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))

    corpus = Corpus(args.data, args.max_vocab)
    train_data = batchify(corpus.train, args.batch_size).to(device)
    ntokens = len(corpus.dictionary)
    print(f"vocabulary: {ntokens} words, training tokens: {len(corpus.train)}")

    model = LSTMModel(ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.tied)
    model = model.to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    epoch_loss = float("nan")
    for epoch in range(1, args.epochs + 1):
        epoch_start_time = time.time()
        epoch_loss = train(model, train_data, criterion, optimizer, epoch, args)
        print(
            f"| end of epoch {epoch:3d} | time: {time.time() - epoch_start_time:5.2f}s "
            f"| train loss {epoch_loss:5.2f} | train ppl {math.exp(min(epoch_loss, 50)):8.2f}"
        )

    print(f"final loss {epoch_loss:.4f}")


if __name__ == "__main__":
    main()
