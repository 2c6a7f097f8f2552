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
func (f *fake) Name() string          { return "fake" }
func (f *fake) Errorf(string, ...any) { f.failed = true }
func (f *fake) Fatalf(string, ...any) { f.failed, f.fatal = true, true }
func (f *fake) FailNow()              { f.failed, f.fatal = true, true }

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

func TestRejects(t *testing.T) {
	type pair struct{ a, b int }
	validate := func(p *pair) error {
		if p.a < 0 {
			return errors.New("a is negative")
		}
		return nil
	}
	for _, c := range []struct {
		ok            pair
		edit          func(*pair)
		failed, fatal bool
	}{
		{pair{1, 2}, func(p *pair) { p.a = -1 }, false, false},
		{pair{1, 2}, func(p *pair) { p.b = -1 }, true, false}, // accepted
		{pair{-1, 2}, func(p *pair) { p.a = -2 }, true, true}, // ok rejected
	} {
		f := &fake{}
		Rejects(f, c.ok, validate, []Edit[pair]{{"edit", c.edit, "negative"}})
		if f.failed != c.failed || f.fatal != c.fatal {
			t.Errorf("Rejects(%v): failed %v, fatal %v; want %v, %v", c.ok, f.failed, f.fatal, c.failed, c.fatal)
		}
	}
	// The edits change copies: the second sees ok, not the first's edit.
	f := &fake{}
	Rejects(f, pair{1, 2}, validate, []Edit[pair]{
		{"first", func(p *pair) { p.a = -1 }, "negative"},
		{"second", func(p *pair) { p.b = 3 }, "negative"},
	})
	if !f.failed {
		t.Error("the second edit saw the first's change")
	}
}
