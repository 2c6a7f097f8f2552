package jsonobj

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{`{}`, ` {"a": 1}`, "\n{\"a\": null}\n", `{"a": `, `not json`} {
		if err := Check([]byte(ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for in, want := range map[string]string{"null": "holds null", " null\n": "holds null", "[]": "an array", "3": "a number",
		`"x"`: "a string", "true": "holds true", "": "empty", "  \n": "empty"} {
		if err := Check([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", in, err, want)
		}
	}
}
