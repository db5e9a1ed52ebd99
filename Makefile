# The README's quick start: `make demo` runs the sample scenario, `make test` runs every check.
# Both create (or reuse) .venv and install what they need, so a fresh machine with Python 3.11 works.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m samples.demo $(if $(HANDLER),--handler $(HANDLER)) $(if $(EVENT),--event $(EVENT)) $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict idempotent_lambda

test: lint typecheck
	$(BIN)/coverage erase
	$(BIN)/coverage run -m pytest -q tests
	$(BIN)/coverage report

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python -m benchmarks.run

# template.yaml: cfn-lint, sam validate --lint, sam build (into a temporary folder), offline
# except for PyPI. The tools live in their own venv; the `*` .gitignore keeps git and ruff out.
SAM_VENV := .venv-sam
SAM_STAMP := $(SAM_VENV)/.installed
SAM_ENV := SAM_CLI_TELEMETRY=0 AWS_EC2_METADATA_DISABLED=true AWS_REGION=us-east-1 \
	AWS_DEFAULT_REGION=us-east-1 PATH="$(CURDIR)/$(SAM_VENV)/bin:$$PATH"

.PHONY: template-check
test: template-check

$(SAM_STAMP): samples/requirements-sam.txt
	$(PYTHON) -m venv $(SAM_VENV)
	echo '*' > $(SAM_VENV)/.gitignore
	$(SAM_VENV)/bin/pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/pip install --quiet -r samples/requirements-sam.txt
	touch $(SAM_STAMP)

template-check: $(SAM_STAMP)
	$(SAM_ENV) $(SAM_VENV)/bin/cfn-lint template.yaml
	$(SAM_ENV) $(SAM_VENV)/bin/sam validate --lint --template-file template.yaml --region us-east-1
	@build=$$(mktemp -d) && trap 'rm -rf "$$build"' EXIT && echo "sam build (into $$build)" && \
	if $(SAM_ENV) $(SAM_VENV)/bin/sam build --template-file template.yaml --region us-east-1 \
		--build-dir "$$build/build" --parallel >"$$build/log" 2>&1; \
	then echo "sam build: Build Succeeded"; else cat "$$build/log"; exit 1; fi

clean:
	rm -rf $(VENV) .venv-sam .coverage .mypy_cache .ruff_cache build *.egg-info
