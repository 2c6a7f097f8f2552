package framepack

import (
	"context"
	"math"
	"reflect"
	"strings"
	"testing"
)

// callAll calls every exported method of p with zero arguments (a live
// context for a context.Context, so that Generate gets past its nil check)
// and fails on a panic; errors returned must be non-nil where a method
// returns one.
func callAll(t *testing.T, what string, p *Pipeline) {
	t.Helper()
	v := reflect.ValueOf(p)
	ctxType := reflect.TypeFor[context.Context]()
	for i := range v.NumMethod() {
		m := v.Type().Method(i)
		args := []reflect.Value{}
		for j := 1; j < m.Type.NumIn(); j++ {
			in := m.Type.In(j)
			if in == ctxType {
				args = append(args, reflect.ValueOf(context.Background()))
			} else {
				args = append(args, reflect.Zero(in))
			}
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: %s panicked: %v", what, m.Name, r)
				}
			}()
			out := v.Method(i).Call(args)
			for _, o := range out {
				if o.Type() == reflect.TypeFor[error]() && o.IsNil() && m.Name != "Close" {
					t.Errorf("%s: %s returned no error", what, m.Name)
				}
			}
		}()
	}
}

func TestPipelineAfterCloseAndZero(t *testing.T) {
	var nilP *Pipeline
	callAll(t, "nil *Pipeline", nilP)
	callAll(t, "zero Pipeline", &Pipeline{})

	p, err := Load(tinyDir(t), Options{Device: DeviceCPU, Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Device() == "" || p.Budget().Cap <= 0 || p.CropStart() <= 0 {
		t.Fatalf("an open pipeline: device %q, budget %v, crop start %d", p.Device(), p.Budget(), p.CropStart())
	}
	p.Close()
	p.Close() // twice is harmless
	callAll(t, "closed Pipeline", p)
	if d, b := p.Device(), p.Budget(); d != "" || b.Cap != 0 {
		t.Errorf("after Close: Device %q, Budget %v; want zero values", d, b)
	}
	req := smallRequest(testImage(t))
	if _, err := p.Generate(context.Background(), req); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Generate after Close: %v", err)
	}
	if _, err := loadTiny(t).Generate(nil, req); err == nil || !strings.Contains(err.Error(), "context") {
		t.Errorf("Generate(nil, req): %v", err)
	}
}

func TestLoadRefusesBadTeaCacheThreshold(t *testing.T) {
	for _, th := range []float32{float32(math.NaN()), -0.1, float32(math.Inf(1))} {
		_, err := Load(tinyDir(t), Options{Device: DeviceCPU, Logger: quietLogger(t), TeaCacheThreshold: th})
		if err == nil || !strings.Contains(err.Error(), "TeaCacheThreshold") {
			t.Errorf("threshold %v: %v, want an error naming TeaCacheThreshold", th, err)
		}
	}
}

// FRAMEPACK_FAULTS is validated by Load on the CPU, and alloc.nth fails a
// CPU allocation of Generate.
func TestFaultsOnCPULoad(t *testing.T) {
	t.Setenv("FRAMEPACK_FAULTS", "conv3d.cpu=sometimes")
	if _, err := Load(tinyDir(t), Options{Device: DeviceCPU, Logger: quietLogger(t)}); err == nil || !strings.Contains(err.Error(), "FRAMEPACK_FAULTS") {
		t.Fatalf("malformed FRAMEPACK_FAULTS: %v", err)
	}
	t.Setenv("FRAMEPACK_FAULTS", "alloc.nth=40")
	p := loadTiny(t)
	_, err := p.Generate(context.Background(), smallRequest(testImage(t)))
	if err == nil || !strings.Contains(err.Error(), "alloc.nth=40") {
		t.Fatalf("alloc.nth=40: %v", err)
	}
	t.Logf("alloc.nth=40: %v", err)
}
