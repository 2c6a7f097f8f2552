# framepack — build, test, and the test binaries for a GPU machine.
GO      ?= go
BIN     := bin
DEVICE  := .device
GPU_PKGS := ./hip ./rocblas ./miopen ./backend/gpu ./internal/device ./vae ./vae/wan ./model/hunyuan ./model/clip ./model/llama ./model/siglip ./section ./sampler

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
# copy the checkout with $(DEVICE)/ there and run each binary from its
# package's folder (the golden cases are found from there), e.g.
#   cd backend/gpu && ../../$(DEVICE)/backend_gpu.test -test.v
#   cd model/hunyuan && FRAMEPACK_TEST_DEVICE=gpu ../../$(DEVICE)/model_hunyuan.test -test.run Golden
device-tests: build
	mkdir -p $(DEVICE)
	cp $(BIN)/framepack $(DEVICE)/framepack
	for p in $(GPU_PKGS); do \
		$(GO) test -c -ldflags="-s -w" -o $(DEVICE)/$$(echo $${p#./} | tr / _).test $$p || exit 1; \
	done
	$(GO) test -c -ldflags="-s -w" -o $(DEVICE)/framepack_root.test .

clean:
	rm -rf $(BIN) $(DEVICE)
