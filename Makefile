# Everything a newcomer needs, from nothing: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test unit lint bench clean

# setup.py and the C source: the compiled kernel is built by the install (setup.py).
$(STAMP): pyproject.toml setup.py scorer/core/_kernel.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/scorer demo

# The integration tests need a broker (they start their own when KAFKA_BOOTSTRAP_SERVERS
# is unset), Prometheus and Chromium (installed here when missing, see prometheus-install
# and chromium-install).
test: $(STAMP) prometheus-install chromium-install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python bench/offline.py

clean:
	rm -rf $(VENV) build *.egg-info

# Prometheus from Debian's package, for tests/integration/test_prometheus.py and
# deploy/README.md. Idempotent: installs only when prometheus or promtool is missing.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: prometheus-install prometheus-check
prometheus-install:
	@if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then \
		echo "prometheus present: $$(prometheus --version 2>&1 | head -n 1)"; \
	else \
		echo "prometheus or promtool missing: installing Debian's prometheus package"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive \
			apt-get install -y --no-install-recommends prometheus && \
		command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
			echo "prometheus-install: installing failed, or prometheus and promtool are not on PATH" >&2; \
			exit 1; }; \
	fi

prometheus-check: prometheus-install
	promtool check config deploy/prometheus/prometheus.yml
	promtool check config deploy/prometheus/prometheus.local.yml
	promtool check rules deploy/prometheus/rules/*.yml

# Chromium and its WebDriver from Debian's packages, for the evals page's browser test
# (tests/integration/test_evals_page.py drives them with Selenium). Idempotent: installs
# only when chromium or chromedriver is missing.
.PHONY: chromium-install
chromium-install:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then \
		echo "chromium present: $$(chromium --version 2>/dev/null | head -n 1)"; \
	else \
		echo "chromium or chromedriver missing: installing Debian's chromium and chromium-driver"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive \
			apt-get install -y --no-install-recommends chromium chromium-driver && \
		command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
			echo "chromium-install: installing failed, or chromium and chromedriver are not on PATH" >&2; \
			exit 1; }; \
	fi

# A local Kafka broker (KRaft, Apache Kafka from Maven Central jars; needs Java 17+
# and Maven) in .scorer/kafka; see docs/kafka.md. `scorer` then finds it by itself.
.PHONY: kafka-up kafka-down kafka-status topics
kafka-up: $(STAMP)
	$(BIN)/scorer kafka up

kafka-down: $(STAMP)
	$(BIN)/scorer kafka down

kafka-status: $(STAMP)
	$(BIN)/scorer kafka status

topics: $(STAMP)
	$(BIN)/scorer topics create
