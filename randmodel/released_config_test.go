package randmodel

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestReleasedConfigsVerbatim checks that the configs make-models writes at
// the released size are the released files' values with the same JSON
// types: transformers' typed configs refuse 1 where the file has 1.0.
func TestReleasedConfigsVerbatim(t *testing.T) {
	for part, cfg := range releasedConfigs() {
		got, err := marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("..", "testdata", "released", part, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		g, w := numbersAsWritten(t, got), numbersAsWritten(t, want)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: written config differs from testdata/released:\n got %v\nwant %v", part, g, w)
		}
	}
	got, err := marshal(preprocessorConfig)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "testdata", "released", "feature_extractor", "preprocessor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if g, w := numbersAsWritten(t, got), numbersAsWritten(t, want); !reflect.DeepEqual(g, w) {
		t.Errorf("preprocessor_config.json differs:\n got %v\nwant %v", g, w)
	}
}

// numbersAsWritten decodes JSON keeping each number's text, normalised so
// that 1e-05 and 1e-5 compare equal but 1 and 1.0 do not.
func numbersAsWritten(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return normNumbers(v)
}

func normNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		s := x.String()
		f, err := x.Float64()
		if err != nil {
			return s
		}
		if bytes.ContainsAny([]byte(s), ".eE") {
			return f // a float: its value
		}
		return s // an int: its digits
	case map[string]any:
		for k, e := range x {
			x[k] = normNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normNumbers(e)
		}
	}
	return v
}
