"""Play every task's demonstration for two seeds and report what does not score 1.

    .venv/bin/python trl_env_envs/reasoning_gym/tests/sweep_demonstrations.py

Not collected by pytest (it takes minutes); the test file plays a spread of tasks.
"""

from __future__ import annotations

import time

from trl_env.envkit import OptionError
from trl_env_reasoning_gym import TASKS, ReasoningGymEnv


def main() -> None:
    start = time.monotonic()
    scored, without, refused, wrong = 0, [], [], []
    for task in TASKS:
        env = ReasoningGymEnv(task=task)
        try:
            for seed in ("train-0", "eval-0"):
                env.reset(seed)
                demonstration = env.demonstrate(seed)
                if demonstration is None:
                    without.append(task)
                    break
                env.step(demonstration[0])
                if env.reward == 1.0:
                    scored += 1
                else:
                    wrong.append(f"{task}/{seed}: {env.reward:g}")
        except OptionError as exc:
            refused.append(f"{task}: {exc}")
    took = time.monotonic() - start
    print(f"{len(TASKS)} tasks, {scored} demonstrations scored 1 in {took:.0f} s")
    print(f"no stored answer ({len(without)}): {', '.join(without)}")
    print(f"seeds refused ({len(refused)}): " + "; ".join(refused))
    print(f"scored below 1 ({len(wrong)}): " + "; ".join(wrong))


if __name__ == "__main__":
    main()
