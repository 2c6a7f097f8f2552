package vae

import (
	"reflect"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
)

// Every exported method of a closed VAE and of a nil one returns zero
// values or fails as an op (an error through tensor.Catch), never with
// another panic.
func TestVAEAfterCloseAndNil(t *testing.T) {
	be := cpu.New()
	v, err := RandomWeights(smallConfig(), be, tensor.F32, 1)
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	v.Close()
	var nilV *VAE
	s := tensor.NewScope(be)
	defer s.Close()
	shape := []int{1, 16, 2, 4, 4}
	for _, c := range []struct {
		what string
		v    *VAE
	}{{"closed", v}, {"nil", nilV}} {
		rv := reflect.ValueOf(c.v)
		for i := range rv.NumMethod() {
			m := rv.Type().Method(i)
			var args []reflect.Value
			for j := 1; j < m.Type.NumIn(); j++ {
				switch in := m.Type.In(j); in {
				case reflect.TypeFor[*tensor.Scope]():
					args = append(args, reflect.ValueOf(s))
				case reflect.TypeFor[*tensor.Tensor]():
					args = append(args, reflect.ValueOf(randLatents(1, shape...)))
				case reflect.TypeFor[[]int]():
					args = append(args, reflect.ValueOf(shape))
				default:
					args = append(args, reflect.Zero(in))
				}
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s VAE: %s panicked: %v", c.what, m.Name, r)
					}
				}()
				err := tensor.Catch(func() { rv.Method(i).Call(args) })
				if (m.Name == "Decode" || m.Name == "Encode" || m.Name == "EncodeWith") && err == nil {
					t.Errorf("%s VAE: %s succeeded", c.what, m.Name)
				}
			}()
		}
	}
}
