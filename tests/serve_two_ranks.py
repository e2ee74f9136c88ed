"""One rank of a two-process GRPO step (run by tests/test_serve_train.py under accelerate):
generation on a vLLM server (TRL's weight sync not involved: use_vllm is off), episodes on env
servers. Writes what its rank played to OUT/rankN.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trl_env import make_rollout_func
from trl_env.models import load_model
from trl_env.resolve import resolve_stack
from trl_env.testing.grpo import cpu_grpo_trainer
from trl_env.training import end_process_group


def main(out: str, vllm_url: str, *env_servers: str) -> None:
    stack = resolve_stack("qwen3", {}, "tiny")
    played: list[dict] = []
    rollout = make_rollout_func(
        env="guess",
        processor=stack.processor,
        backend="vllm",
        backend_options={"vllm_server_base_url": vllm_url},
        env_servers=env_servers,
        max_new_tokens=4,
        max_turns=2,
        on_episodes=lambda eps: played.extend(
            {"seed": e.seed, "server": e.server, "error": e.error, "status": str(e.status)}
            for e in eps
        ),
    )
    trainer = cpu_grpo_trainer(
        load_model(stack.model_path),
        stack.tokenizer,
        rollout,
        [f"train-{i}" for i in range(8)],
        out,
        num_generations=2,
    )
    trainer.train()
    rank = trainer.accelerator.process_index
    Path(out, f"rank{rank}.json").write_text(json.dumps(played))
    end_process_group()  # as docs/scaling.md says: the group ends before the trainer is freed


if __name__ == "__main__":
    main(*sys.argv[1:])
