# The README's quick start: `make demo` runs the sample scenario, `make test` runs every check.
# Both create (or reuse) .venv and install only what they need (demo: the package, moto, the
# sample's dependencies), so a fresh machine with Python 3.11 works.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# One stamp per set of tools, so `make demo` installs only what the demo needs. The sets are
# PEP 735 dependency groups in pyproject.toml (`pip install --group`, pip >= 25.1: the venv's pip
# is upgraded first).
BASE_STAMP := $(VENV)/.base
DEMO_STAMP := $(VENV)/.demo
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs
RELEASE_STAMP := $(VENV)/.release
CHARTS_STAMP := $(VENV)/.charts

.PHONY: demo test test-pythons lint typecheck unit bench bench-json charts clean docs docs-check \
	package-check dynalite stepfunctions-tools mermaid system-tools simulate soak simulate-mutants

# Debian's packages the checks use: chromium (the docs looked at in a browser), npm (mermaid,
# dynalite, the Step Functions checkers) and redis-server (the Redis store's tests, which skip
# without it). Installed with apt-get when missing and the user may (root on Debian); otherwise
# named here, and the docs checks then fail for want of the first two.
SYSTEM_TOOLS := chromium npm redis-server

system-tools:
	@missing=""; for tool in $(SYSTEM_TOOLS); do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing$$missing (apt-get)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$missing >/dev/null; \
	else echo "missing:$$missing (Debian: sudo apt-get install$$missing)" >&2; fi

$(BASE_STAMP):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	touch $(BASE_STAMP)

$(DEMO_STAMP): pyproject.toml | $(BASE_STAMP)
	$(BIN)/pip install --quiet -e . --group demo
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(BASE_STAMP)
	$(BIN)/pip install --quiet -e . --group dev
	touch $(STAMP)

$(DOCS_STAMP): pyproject.toml | $(BASE_STAMP)
	$(BIN)/pip install --quiet -e . --group docs
	touch $(DOCS_STAMP)

$(RELEASE_STAMP): pyproject.toml | $(BASE_STAMP)
	$(BIN)/pip install --quiet --group release
	touch $(RELEASE_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python -m samples.demo $(if $(HANDLER),--handler $(HANDLER)) $(if $(EVENT),--event $(EVENT)) $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict idempotent_lambda

# SAMPLE_COPY_SAM: tests/functional/test_sample_copy.py builds a copy of the sample stack with
# this sam (template-check installed it) instead of skipping for want of one.
test: system-tools lint typecheck docs-check package-check dynalite stepfunctions-tools template-check cdk-check
	$(BIN)/coverage erase
	SAMPLE_COPY_SAM="$(CURDIR)/$(SAM_VENV)/bin/sam" $(BIN)/coverage run -m pytest -q tests
	$(BIN)/coverage report

# The simulator (tests/simulation, docs/reliability.md): `make test` runs its budgeted sweep
# with everything else; `simulate` runs that sweep alone; `soak` runs SOAK_SEEDS seeds past the
# sweep's (default 1000), or for SOAK_MINUTES minutes; `simulate-mutants` shows that the sweep
# catches each deliberate fault of tests/simulation/mutants.py, each on a copy of the package.
simulate: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/simulation

soak: $(STAMP)
	$(BIN)/python -m tests.simulation --soak $(if $(SOAK_SEEDS),--seeds $(SOAK_SEEDS)) \
		$(if $(SOAK_MINUTES),--minutes $(SOAK_MINUTES))

simulate-mutants: $(STAMP)
	$(BIN)/python -m tests.simulation.mutants

# dynalite (npm), a DynamoDB engine independent of moto: the store contract suite runs on it too
# (tests/integration/_dynalite.py). Installed once per version into .cache/; without npm, or if
# the install fails, its tests skip and say so.
DYNALITE_VERSION := 4.0.0
DYNALITE_STAMP := .cache/dynalite/.installed-$(DYNALITE_VERSION)

dynalite: $(DYNALITE_STAMP)

$(DYNALITE_STAMP):
	@if ! command -v npm >/dev/null; then echo "npm not found: the dynalite tests will skip" >&2; \
	elif npm install --prefix .cache/dynalite --no-save --no-audit --no-fund --loglevel=error \
		dynalite@$(DYNALITE_VERSION); then touch $@; \
	else echo "dynalite could not be installed: its tests will skip" >&2; fi

# asl-validator and jsonata (npm, with the jsonpath-plus that asl-validator uses): the Step
# Functions recipe's test validates examples/step_functions/*.asl.json and evaluates the payloads
# of their task states (tests/examples/_step_functions.py). Installed once per set of versions
# into .cache/; without npm its test skips and says so, and a failed install fails here.
STEPFUNCTIONS_TOOLS := asl-validator@4.0.0 jsonata@2.2.2 jsonpath-plus@10.3.0
STEPFUNCTIONS_STAMP := .cache/stepfunctions/.installed-asl4.0.0-jsonata2.2.2-jsonpath10.3.0

stepfunctions-tools: $(STEPFUNCTIONS_STAMP)

$(STEPFUNCTIONS_STAMP):
	@if ! command -v npm >/dev/null; then echo "npm not found: the Step Functions recipe's test will skip" >&2; \
	else npm install --prefix .cache/stepfunctions --no-save --no-audit --no-fund --loglevel=error \
		$(STEPFUNCTIONS_TOOLS) && touch $@; fi
# mermaid (npm) draws the docs' diagrams in the reader's browser. The site serves its own copy
# (scripts/mkdocs_mermaid.py, a mkdocs hook, copies it into the built site), so the pages need no
# network. `npm pack` fetches the package alone, without its 100-odd dependencies, which the
# self-contained dist/mermaid.min.js does not need; only that file and the licence are kept.
# Unlike dynalite it is not optional: without npm, or if the download fails, the docs targets
# fail. Major version 11, the one Material for MkDocs drives.
MERMAID_VERSION := 11.17.2
MERMAID_STAMP := .cache/mermaid/.installed-$(MERMAID_VERSION)

mermaid: $(MERMAID_STAMP)

$(MERMAID_STAMP):
	@command -v npm >/dev/null || { echo "npm not found: the docs' diagrams need mermaid from npm" >&2; exit 1; }
	rm -rf .cache/mermaid && mkdir -p .cache/mermaid
	cd .cache/mermaid && npm pack --loglevel=error mermaid@$(MERMAID_VERSION) >/dev/null && \
		tar -xzf mermaid-$(MERMAID_VERSION).tgz package/dist/mermaid.min.js package/LICENSE && \
		rm mermaid-$(MERMAID_VERSION).tgz
	touch $@

# The docs site (mkdocs.yml, docs/): `make docs` serves it on http://127.0.0.1:8000, `make test`
# builds it with --strict (a broken link, a missing page or snippet fails) into a throwaway folder.
docs: $(DOCS_STAMP) $(MERMAID_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# Then the built pages are read for what --strict lets through: reStructuredText remnants of
# docstrings (==== rules, ``literals``, :: markers, :class: roles) and docs paths written as text
# (scripts/check_site.py), and every diagram is drawn and every image (the benchmark charts)
# loaded in headless Chromium with no network (scripts/check_diagrams.py: Chromium missing
# fails it).
docs-check: $(DOCS_STAMP) $(MERMAID_STAMP)
	@site=$$(mktemp -d) && trap 'rm -rf "$$site"' EXIT && \
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir "$$site" && \
	echo "mkdocs build --strict: ok" && \
	$(BIN)/python scripts/check_site.py "$$site" && \
	$(BIN)/python scripts/check_diagrams.py "$$site"

# The release artefacts: sdist and wheel built as a publisher would (`python -m build`), checked
# by `twine check --strict`, then the wheel installed into a clean venv that runs a decorated
# handler and the CLI (scripts/check_dist.py).
package-check: $(RELEASE_STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist . >/dev/null
	$(BIN)/twine check --strict dist/*
	$(BIN)/python scripts/check_dist.py dist

# The unit suite on the other supported Pythons (3.11 runs everything above). Each interpreter
# is found under pyenv, else on PATH, and gets its own venv with only the unit group installed.
OTHER_PYTHONS ?= 3.10 3.12 3.13

test-pythons:
	@for version in $(OTHER_PYTHONS); do \
		python=$$(pyenv prefix $$version 2>/dev/null)/bin/python; \
		[ -x "$$python" ] || python=$$(command -v python$$version) || \
			{ echo "Python $$version not found (pyenv or PATH)"; exit 1; }; \
		venv=.venv-py$$version; \
		if [ ! -f $$venv/.installed ] || [ pyproject.toml -nt $$venv/.installed ]; then \
			"$$python" -m venv $$venv && $$venv/bin/pip install --quiet --upgrade pip && \
			$$venv/bin/pip install --quiet -e . --group unit && touch $$venv/.installed || exit 1; \
		fi; \
		echo "unit suite on $$($$venv/bin/python --version)"; \
		$$venv/bin/python -m pytest -q -p no:cacheprovider tests/unit || exit 1; \
	done

bench: $(STAMP)
	$(BIN)/pip install --quiet --group bench
	$(BIN)/python -m benchmarks.run

# The figures of the charts and of the README, refreshed: the CPU, round-trip and import suites,
# then 100-record batches on real clients, written to benchmarks/results/*.json (commit them,
# then `make charts`). About 6 minutes on a shared 2-core machine.
bench-json: $(STAMP)
	$(BIN)/pip install --quiet --group bench
	$(BIN)/python -m benchmarks.run --json benchmarks/results/invocation.json
	$(BIN)/python -m benchmarks.bench_pipeline_cpu --runs 3 --sizes 100 --client own \
		--timeout-s 60 --json benchmarks/results/batches.json

$(CHARTS_STAMP): pyproject.toml | $(BASE_STAMP)
	$(BIN)/pip install --quiet --group charts
	touch $(CHARTS_STAMP)

# docs/assets/charts/*.svg and the figures between the `charts` markers of README.md and
# docs/benchmarks.md, drawn from benchmarks/results/*.json (scripts/charts.py; the same JSON
# draws the same bytes, which tests/functional/test_charts.py checks).
charts: $(CHARTS_STAMP)
	$(BIN)/python scripts/charts.py

# template.yaml: cfn-lint, sam validate --lint, and sam build of a copy of template.yaml and
# samples/ in an empty folder, the library coming from the checkout's wheel through
# PIP_FIND_LINKS (scripts/check_sample_copy.py), as a user builds it. Offline except for PyPI.
# The tools live in their own venv; the `*` .gitignore keeps git and ruff out.
SAM_VENV := .venv-sam
SAM_STAMP := $(SAM_VENV)/.installed
SAM_ENV := SAM_CLI_TELEMETRY=0 AWS_EC2_METADATA_DISABLED=true AWS_REGION=us-east-1 \
	AWS_DEFAULT_REGION=us-east-1 PATH="$(CURDIR)/$(SAM_VENV)/bin:$$PATH"

.PHONY: template-check

$(SAM_STAMP): samples/requirements-sam.txt
	$(PYTHON) -m venv $(SAM_VENV)
	echo '*' > $(SAM_VENV)/.gitignore
	$(SAM_VENV)/bin/pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/pip install --quiet -r samples/requirements-sam.txt
	touch $(SAM_STAMP)

template-check: $(SAM_STAMP)
	$(SAM_ENV) $(SAM_VENV)/bin/cfn-lint --include-checks I -- template.yaml
	$(SAM_ENV) $(SAM_VENV)/bin/sam validate --lint --template-file template.yaml --region us-east-1
	$(SAM_ENV) $(SAM_VENV)/bin/python scripts/check_sample_copy.py --sam $(SAM_VENV)/bin/sam

# The CDK construct (cdk/, its own distribution idempotent-lambda-cdk): cdk/tests synthesize
# examples/cdk/app.py and stacks of their own, assert on the templates and run cfn-lint on them.
# Offline: jsii runs the CDK in the machine's Node, no CDK CLI. Its own venv, like sam's. Node 20
# (Debian's) works but is past jsii's support window: the banner saying so is silenced. The
# library is installed too: the dashboard's test checks its metrics against what it emits.
CDK_VENV := .venv-cdk
CDK_STAMP := $(CDK_VENV)/.installed

.PHONY: cdk-check

$(CDK_STAMP): cdk/requirements-test.txt cdk/pyproject.toml pyproject.toml
	$(PYTHON) -m venv $(CDK_VENV)
	echo '*' > $(CDK_VENV)/.gitignore
	$(CDK_VENV)/bin/pip install --quiet --upgrade pip
	$(CDK_VENV)/bin/pip install --quiet -r cdk/requirements-test.txt -e ./cdk -e .
	touch $(CDK_STAMP)

cdk-check: $(CDK_STAMP)
	cd cdk && JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 ../$(CDK_VENV)/bin/python -m pytest -q

clean:
	rm -rf $(VENV) .venv-py3.* .venv-sam .venv-cdk .cache .coverage .mypy_cache .ruff_cache build \
		dist site *.egg-info
