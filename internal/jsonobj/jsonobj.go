// Package jsonobj checks that a JSON file holds an object, as every config
// file does: encoding/json decodes null into a struct as nothing at all, so
// a config.json of null would read as one giving every default.
package jsonobj

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Check is nil when raw is a JSON object, or not valid JSON at all (the
// decoder that follows reports that, with its place); otherwise an error
// saying what raw holds instead.
func Check(raw []byte) error {
	tok, err := json.NewDecoder(bytes.NewReader(raw)).Token()
	if errors.Is(err, io.EOF) {
		return errors.New("is empty, not a JSON object")
	}
	if err != nil {
		return nil
	}
	var what string
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return nil
		}
		what = "an array"
	case nil:
		what = "null"
	case bool:
		what = fmt.Sprintf("%v", v)
	case float64:
		what = "a number"
	case string:
		what = "a string"
	}
	return fmt.Errorf("holds %s, not a JSON object", what)
}
