"""Training batches sampled from the policy, in worker processes (gflownet's
``GraphSampler.sample_from_model``, ``DataSource.do_sample_model`` and its DataLoader).

`BatchSampler.sample` rolls ``n`` trajectories out together: each step featurises the
unfinished graphs, asks the sampling model for the logits of their actions, draws one
action per graph (`batching.sample`), and steps the environment, recording ``log P_B``
of the uniform backward policy (``-log`` of the child's parents; 0 for Stop). A finished
graph that RDKit cannot make a molecule of is invalid: its log-reward is gflownet's
``illegal_action_logreward``; the valid ones are scored by the proxy (``SEHTask``). The
training batch holds every state graph of every trajectory (collated), the `flat` index
of the action taken in each, ``log P_B``, the trajectories' lengths, log-rewards,
conditioning and validity: what gflownet's ``construct_batch`` hands the trainer.

`Batches` is the IterableDataset a DataLoader runs in ``num_workers`` processes, each
producing whole batches as gflownet's workers do. As in gflownet, the workers do the
environment, chemistry and featurising on their CPU while every network call goes to
the training process (`ModelServer`: a thread there runs the sampling model and the
proxy on the device, as gflownet's ``MPObjectProxy`` does); messages are numpy arrays
over multiprocessing queues (gflownet: pickled batches or a shared pinned buffer).
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from batching import MASKS, collate, decode, encode, flat, log_softmax, sample
from env import STOP, FragEnv, FragGraph
from proxy import collate_mols, mol_arrays

Arrays = dict[str, np.ndarray]
Call = Callable[[str, Arrays], Any]


class BatchSampler:
    """Samples training batches of ``n`` trajectories (one conditioning for all); with a
    ``log_dir``, logs every batch's molecules as gflownet's ``SQLiteLogHook`` does."""

    def __init__(
        self,
        env: FragEnv,
        n: int,
        cond: np.ndarray,
        beta: float,
        illegal_log_reward: float = -75.0,
        max_len: int = 128,
        log_dir: str | None = None,
    ) -> None:
        self.env, self.n, self.cond, self.beta = env, n, cond.astype(np.float32), beta
        self.illegal = illegal_log_reward
        self.max_len = max_len
        self.log_dir = log_dir
        self._log: sqlite3.Connection | None = None

    def rollout(self, call: Call) -> list[dict[str, Any]]:
        """``n`` trajectories: states, actions, ``log P_B``, the sum of ``log P_F`` (as
        gflownet's sampler keeps it) and the final graph."""
        trajs = [
            {"states": [], "actions": [], "log_pb": [], "log_pf": 0.0, "valid": True}
            for _ in range(self.n)
        ]
        graphs = [FragGraph() for _ in range(self.n)]
        alive = list(range(self.n))
        for t in range(self.max_len):
            arrays = collate([self.env.featurise(graphs[i]) for i in alive])
            arrays["cond"] = np.repeat(self.cond[None], len(alive), axis=0)
            logits = flat([torch.from_numpy(x) for x in call("policy", arrays)])
            masks = flat([torch.from_numpy(arrays[k]) for k in MASKS])
            owner = _owners(arrays)
            index = sample(logits, masks, owner, len(alive))
            log_pf = log_softmax(logits, owner, len(alive))[index].tolist()
            still = []
            for k, (i, action) in enumerate(zip(alive, decode(index.numpy(), arrays), strict=True)):
                traj, g = trajs[i], graphs[i]
                traj["states"].append(g)
                traj["actions"].append(action)
                traj["log_pf"] += log_pf[k]
                if action[0] == STOP:
                    traj["log_pb"].append(0.0)
                    traj["valid"] = self.env.is_sane(g)
                    continue
                child = self.env.step(g, action)
                traj["log_pb"].append(-float(np.log(self.env.count_backward(child))))
                graphs[i] = child
                if t == self.max_len - 1:
                    traj["valid"] = self.env.is_sane(child)
                else:
                    still.append(i)
            alive = still
            if not alive:
                break
        for traj, g in zip(trajs, graphs, strict=True):
            traj["final"] = g
        return trajs

    def rewards(self, trajs: list[dict[str, Any]], call: Call) -> tuple[np.ndarray, np.ndarray]:
        """The log-reward of each trajectory and the proxy's flat reward (``pred / 8``
        clipped; 0 for an invalid molecule), scored on the valid molecules."""
        from proxy import flat_reward

        log_r = np.full(len(trajs), self.illegal, np.float32)
        flat_r = np.zeros(len(trajs), np.float32)
        valid = [i for i, t in enumerate(trajs) if t["valid"]]
        if valid:
            mols = collate_mols([mol_arrays(self.env.to_mol(trajs[i]["final"])) for i in valid])
            fr = flat_reward(torch.from_numpy(call("proxy", mols)))
            flat_r[valid] = fr.numpy()
            log_r[valid] = (self.beta * fr.clamp_min(1e-30).log()).numpy()
        return log_r, flat_r

    def sample(self, call: Call) -> Arrays:
        """One training batch (see the module docstring); ``x.shape[0]`` is the rate's item."""
        trajs = self.rollout(call)
        log_r, flat_r = self.rewards(trajs, call)
        if self.log_dir is not None:
            self.log(trajs, log_r, flat_r)
        states = [s for t in trajs for s in t["states"]]
        arrays = collate([self.env.featurise(s) for s in states])
        actions = np.array([a for t in trajs for a in t["actions"]], np.int64).reshape(-1, 3)
        arrays["actions"] = encode(actions, arrays)
        arrays["log_pb"] = np.array([p for t in trajs for p in t["log_pb"]], np.float32)
        arrays["traj_lens"] = np.array([len(t["states"]) for t in trajs], np.int64)
        arrays["log_rewards"] = log_r
        arrays["cond"] = np.repeat(self.cond[None], len(trajs), axis=0)
        arrays["is_valid"] = np.array([t["valid"] for t in trajs], np.float32)
        return arrays

    def log(self, trajs: list[dict[str, Any]], log_r: np.ndarray, flat_r: np.ndarray) -> None:
        """Append the batch to ``<log_dir>/generated_mols_<worker>.db`` (SMILES of the valid
        molecules, reward ``exp(log R / beta)``, flat reward, beta), as gflownet does."""
        from rdkit import Chem

        if self._log is None:
            info = torch.utils.data.get_worker_info()
            os.makedirs(self.log_dir, exist_ok=True)
            path = os.path.join(self.log_dir, f"generated_mols_{info.id if info else 0}.db")
            self._log = sqlite3.connect(path, timeout=300)
            self._log.execute(
                "create table if not exists results (smi text, r real, fr_0 real, ci_beta real)"
            )
        smiles = [
            Chem.MolToSmiles(self.env.to_mol(t["final"])) if t["valid"] else "" for t in trajs
        ]
        reward = np.exp(log_r / self.beta).tolist()
        rows = zip(smiles, reward, flat_r.tolist(), [self.beta] * len(trajs), strict=True)
        self._log.executemany("insert into results values (?, ?, ?, ?)", list(rows))
        self._log.commit()


def _owners(arrays: Arrays) -> torch.Tensor:
    g = arrays["node_start"].shape[0]
    types = arrays["add_node_mask"].shape[1]
    cols = arrays["set_edge_attr_mask"].shape[1]
    return torch.cat(
        [
            torch.arange(g),
            torch.from_numpy(arrays["batch"]).repeat_interleave(types),
            torch.from_numpy(arrays["edge_batch"]).repeat_interleave(cols),
        ]
    )


class ModelServer:
    """Runs the training process's networks for the sampling workers (a daemon thread).

    ``handlers`` maps a name to a function of a numpy batch; a worker's `call` sends
    ``(worker, name, arrays)`` and waits for the result (an exception is re-raised there)."""

    def __init__(
        self, handlers: dict[str, Callable[[Arrays], Any]], workers: int, ctx: Any
    ) -> None:
        self.handlers = handlers
        self.requests = ctx.Queue()
        self.replies = [ctx.Queue() for _ in range(workers)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="model-server", daemon=True)

    def start(self) -> ModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                worker, name, arrays = self.requests.get(timeout=0.1)
            except queue.Empty:
                continue
            except (EOFError, OSError):
                return
            try:
                result = self.handlers[name](arrays)
            except Exception:  # noqa: BLE001 - sent back to the worker that asked
                result = RuntimeError(f"model server, {name}:\n{traceback.format_exc()}")
            self.replies[worker].put(result)

    def call(self, name: str, arrays: Arrays) -> Any:
        """From a worker process: the handler's result for ``arrays``."""
        info = torch.utils.data.get_worker_info()
        worker = info.id if info is not None else 0
        self.requests.put((worker, name, arrays))
        result = self.replies[worker].get()
        if isinstance(result, Exception):
            raise result
        return result

    def __getstate__(self) -> dict[str, Any]:
        return {"requests": self.requests, "replies": self.replies}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class Batches(torch.utils.data.IterableDataset):
    """Endless training batches (`BatchSampler.sample`'s arrays as tensors); ``call``
    reaches the networks (`ModelServer.call` in worker processes, the handlers themselves
    in the training process)."""

    def __init__(self, make: Callable[[], BatchSampler], call: Call, seed: int) -> None:
        super().__init__()
        self.make, self.call, self.seed = make, call, seed

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        if info is not None:  # each worker its own stream of random actions
            torch.manual_seed(self.seed + 1 + info.id)
        sampler = self.make()
        while True:
            yield {k: torch.from_numpy(v) for k, v in sampler.sample(self.call).items()}
