# The two set-up commands (see README.md):
#   make eval  - install what is missing, build, run `dpukit eval --quick` on the emulated DPU
#   make test  - install what is missing, build, run every test (ctest + pytest)
# Both are idempotent: a second run installs and rebuilds nothing that is current.

BUILD ?= build

.PHONY: eval test setup build clean

setup:
	@bash scripts/setup.sh

build: setup
	@test -f $(BUILD)/build.ninja || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@ninja -C $(BUILD) --quiet

eval: build
	./dpukit eval --quick

# Serial ctest: some tests time real behaviour (insertion rate, peer-death detection)
# and should not share the two cores with each other. Every skip is checked against
# the short list of allowed reasons (scripts/check_skips.py).
RESULTS = $(abspath $(BUILD))/test-results
test: build
	@rm -rf $(RESULTS) && mkdir -p $(RESULTS)/gtest
	cd $(BUILD) && GTEST_OUTPUT=xml:$(RESULTS)/gtest/ ctest --output-on-failure
	.venv/bin/python -m pytest python/tests -q --durations=20 --junitxml=$(RESULTS)/pytest.xml
	.venv/bin/python scripts/check_skips.py $(RESULTS)

clean:
	rm -rf $(BUILD)
