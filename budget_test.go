package framepack

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/framepack-go/framepack/internal/device"
	"github.com/framepack-go/framepack/internal/testutil/memtest"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/randmodel"
)

// smallestJob is the least a job asks: the smallest bucket, one latent
// frame, one step.
func smallestJob(t *testing.T) Request {
	req := DefaultRequest()
	req.RGB = testImage(t)
	req.Resolution, req.Seconds, req.Steps, req.LatentWindowSize = MinResolution, 0.1, 1, 1
	return req
}

// TestBudgetRefusedTiny: on the CPU, where device and host memory are one
// pool, a --ram-limit below the least the tiny model's smallest plan needs
// is refused by Load with a *BudgetError naming that least; at the least
// it names, the smallest job runs.
func TestBudgetRefusedTiny(t *testing.T) {
	least, err := loadTiny(t).leastDevice()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tiny model's least on the CPU: %s (%s)", memory.FormatBytes(least.bytes), least.what)

	_, err = Load(tinyDir(t), Options{Device: DeviceCPU, Logger: quietLogger(t), RAMLimit: memory.Bytes(least.bytes - 1)})
	var be *BudgetError
	if !errors.As(err, &be) || be.Flag != "--ram-limit" || be.Need != least.bytes || be.Have != least.bytes-1 {
		t.Fatalf("want a --ram-limit BudgetError needing %d bytes, got %v", least.bytes, err)
	}
	for _, want := range []string{"--ram-limit ", fmt.Sprintf("is below the %d bytes", least.bytes), "give --ram-limit " + sizeFlag(least.bytes) + " or more"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	t.Logf("refused: %v", err)

	p, err := Load(tinyDir(t), Options{Device: DeviceCPU, Logger: quietLogger(t), RAMLimit: size(t, sizeFlag(least.bytes)), SequentialDecode: true})
	if err != nil {
		t.Fatalf("at the least it named: %v", err)
	}
	defer p.Close()
	res, err := p.Generate(context.Background(), smallestJob(t))
	if err != nil {
		t.Fatalf("the smallest job at the least Load named (%s): %v", sizeFlag(least.bytes), err)
	}
	t.Logf("the smallest job ran at --ram-limit %s: peak %s", sizeFlag(least.bytes), memory.FormatBytes(res.PeakBytes))
}

var released struct {
	once sync.Once
	dir  string
	err  error
}

// releasedDir is a released-size model folder whose weights are holes
// (randmodel.Options.HeadersOnly): configs, tokenizers and headers real.
func releasedDir(t *testing.T) string {
	released.once.Do(func() {
		released.dir = filepath.Join(tinyDir(t), "..", filepath.Base(tinyDir(t))+"-released")
		_, released.err = randmodel.Write(context.Background(), released.dir, randmodel.Options{HeadersOnly: true})
	})
	if released.err != nil {
		t.Fatal(released.err)
	}
	t.Cleanup(func() {})
	return released.dir
}

// size parses a size flag ("" unset), failing the test on an error.
func size(t *testing.T, s string) memory.Size {
	t.Helper()
	var z memory.Size
	if err := z.Set(s); err != nil {
		t.Fatal(err)
	}
	return z
}

// plannedOn is the released-size pipeline as Load plans it on a simulated
// GPU of 141 GiB (an H200) with the given flags, without opening a device
// or reading a weight.
func plannedOn(t *testing.T, vramLimit, ramLimit string) *Pipeline {
	t.Helper()
	dir := releasedDir(t)
	p := &Pipeline{log: quietLogger(t), opts: Options{VRAMLimit: size(t, vramLimit), RAMLimit: size(t, ramLimit)}, paths: map[string]string{}, bytes: map[string]int64{}, gpu: true}
	for _, part := range []string{PartTransformer, PartVAE, PartTextEncoder, PartTextEncoder2, PartTokenizer, PartTokenizer2, PartImageEncoder} {
		p.paths[part] = filepath.Join(dir, part)
	}
	if err := p.readConfigs(); err != nil {
		t.Fatal(err)
	}
	if err := p.chooseDTypes(); err != nil {
		t.Fatal(err)
	}
	if err := p.measure(); err != nil {
		t.Fatal(err)
	}
	const total = 141 * memory.GiB
	b, err := memory.NewBudget("simulated H200", total, total).With(p.opts.VRAMLimit, memory.Size{})
	if err != nil {
		t.Fatal(err)
	}
	p.be = memory.Budgeted(memtest.NewDevice("simulated H200", total), b)
	p.dev = &device.Device{Name: "a simulated 141 GiB GPU"}
	ram, err := p.opts.RAMLimit.Of(0)
	if err != nil {
		t.Fatal(err)
	}
	p.ram = memory.NewHost(ram, 0, "test")
	return p
}

// TestBudgetRealSizePlanner runs the budget check on the released model's
// shapes (weights as holes) on a simulated GPU: --vram-limit 1G is refused
// naming the least, which itself is accepted; a device cap too small for
// the text encoder sends it to the host CPU, and a --ram-limit that cannot
// hold it is refused. On the CPU the transformer runs whole, in f32.
func TestBudgetRealSizePlanner(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a released-size folder of headers")
	}
	err := plannedOn(t, "1G", "").checkBudgets()
	var be *BudgetError
	if !errors.As(err, &be) || be.Flag != "--vram-limit" || be.Have != memory.GiB {
		t.Fatalf("--vram-limit 1G: want a BudgetError, got %v", err)
	}
	if !strings.Contains(err.Error(), "--vram-limit 1G (1.0 GiB) is below the ") || !strings.Contains(err.Error(), "transformer") {
		t.Errorf("message %q", err)
	}
	t.Logf("--vram-limit 1G at real size: %v", err)
	least := sizeFlag(be.Need)
	if err := plannedOn(t, least, "").checkBudgets(); err != nil {
		t.Errorf("--vram-limit %s, the least named: %v", least, err)
	}
	// The streamed transformer, not the 25 GiB of all its weights, sets
	// the least on a GPU.
	if be.Need > 8*memory.GiB || be.Need < 2*memory.GiB {
		t.Errorf("least %s: want the global weights and two blocks, a few GiB", memory.FormatBytes(be.Need))
	}

	// At that cap the 15 GiB text encoder runs on the host CPU: a host
	// budget that cannot hold it is refused.
	err = plannedOn(t, least, "8G").checkBudgets()
	if !errors.As(err, &be) || be.Flag != "--ram-limit" || !strings.Contains(err.Error(), "text_encoder runs on the host CPU") {
		t.Fatalf("--ram-limit 8G with the text encoder on the host: %v", err)
	}
	t.Logf("--vram-limit %s --ram-limit 8G: %v", least, err)
	// With the text encoder on the device, 8G of host memory is enough.
	if err := plannedOn(t, "40G", "8G").checkBudgets(); err != nil {
		t.Errorf("--vram-limit 40G --ram-limit 8G: %v", err)
	}

	// The CPU: the whole transformer in f32.
	_, err = Load(releasedDir(t), Options{Device: DeviceCPU, Logger: quietLogger(t), RAMLimit: size(t, "8G")})
	if !errors.As(err, &be) || be.Flag != "--ram-limit" || !strings.Contains(err.Error(), "sampling holds the transformer's") || be.Need < 40*memory.GiB {
		t.Fatalf("the CPU at --ram-limit 8G: %v", err)
	}
	t.Logf("CPU at real size, --ram-limit 8G: %v", err)
}
