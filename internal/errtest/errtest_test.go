package errtest

import (
	"errors"
	"testing"
)

// fake records what Mentions reports.
type fake struct {
	testing.TB
	failed, fatal bool
}

func (f *fake) Helper()               {}
func (f *fake) Errorf(string, ...any) { f.failed = true }
func (f *fake) Fatalf(string, ...any) { f.failed, f.fatal = true, true }

func TestMentions(t *testing.T) {
	for _, c := range []struct {
		err           error
		want          []string
		failed, fatal bool
	}{
		{errors.New("x.json: bad key foo"), []string{"x.json", "foo"}, false, false},
		{errors.New("x.json: bad key foo"), []string{"x.json", "bar"}, true, false},
		{nil, []string{"x.json"}, true, true},
	} {
		f := &fake{}
		Mentions(f, c.err, c.want...)
		if f.failed != c.failed || f.fatal != c.fatal {
			t.Errorf("Mentions(%v, %q): failed %v, fatal %v; want %v, %v", c.err, c.want, f.failed, f.fatal, c.failed, c.fatal)
		}
	}
}
