package gpu

import (
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/envconfig"
)

// TestConvAPIOption: a convolution API other than legacy, graph or auto is
// refused before any device opens, naming the variable when it came from
// the environment.
func TestConvAPIOption(t *testing.T) {
	if _, err := New(Options{ConvAPI: "fastest"}); err == nil || !strings.Contains(err.Error(), `"fastest"`) {
		t.Errorf("ConvAPI fastest: %v, want an error naming the value", err)
	}
	t.Setenv(envconfig.CUDNNConv, "Graph")
	if _, err := New(Options{}); err == nil || !strings.Contains(err.Error(), envconfig.CUDNNConv) {
		t.Errorf("%s=Graph: %v, want an error naming the variable", envconfig.CUDNNConv, err)
	}
}
