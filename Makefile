# framepack — build, test, and the test binaries for a GPU machine.
GO      ?= go
BIN     := bin
DEVICE  := .device
GPU_PKGS := ./hip ./rocblas ./miopen ./backend/gpu ./vae ./model/hunyuan ./sampler

.PHONY: all build test test-short vet fuzz bench device-tests clean

all: build

build:
	$(GO) build -o $(BIN)/framepack ./cmd/framepack

test:
	$(GO) test ./...

test-short:
	$(GO) test -short ./...

vet:
	$(GO) vet ./...

fuzz:
	$(GO) test ./weights -run '^$$' -fuzz FuzzParseHeader -fuzztime 60s

bench:
	$(GO) test ./backend/cpu -run '^$$' -bench . -benchtime 2x

# Test binaries and the CLI for a machine with a GPU and no Go toolchain:
# copy $(DEVICE)/ there and run e.g. ./$(DEVICE)/backend_gpu.test -test.v
device-tests: build
	mkdir -p $(DEVICE)
	cp $(BIN)/framepack $(DEVICE)/framepack
	for p in $(GPU_PKGS); do \
		if [ -d $$p ]; then $(GO) test -c -o $(DEVICE)/$$(echo $${p#./} | tr / _).test $$p || exit 1; fi; \
	done

clean:
	rm -rf $(BIN) $(DEVICE)
