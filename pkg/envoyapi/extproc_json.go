package envoyapi

import (
	"bytes"
	"encoding/json"
)

// modelField locates the top-level "model" string of a JSON object body.
// A body that is not a JSON object, or whose model is not a string, has
// none. When the key repeats, the last value is the model (as JSON
// decoders read it) and every occurrence is rewritten.
type modelField struct {
	value string
	spans [][2]int // byte ranges of the quoted values, in order
}

// findModel scans body without building it: only the spans of the model
// values are kept, so a rewrite leaves every other byte in place.
func findModel(body []byte) (modelField, bool) {
	var f modelField
	if !json.Valid(body) {
		return f, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return f, false
	}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return f, false
		}
		start := valueStart(body, int(dec.InputOffset()))
		if key != "model" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return f, false
			}
			continue
		}
		tok, err = dec.Token()
		v, isStr := tok.(string)
		if err != nil || !isStr {
			return modelField{}, false
		}
		f.value = v
		f.spans = append(f.spans, [2]int{start, int(dec.InputOffset())})
	}
	return f, len(f.spans) > 0
}

// valueStart skips the white space and colon that follow an object key.
func valueStart(body []byte, i int) int {
	for i < len(body) {
		switch body[i] {
		case ' ', '\t', '\n', '\r', ':':
			i++
		default:
			return i
		}
	}
	return i
}

// withModel returns body with every model value replaced by model; the
// other bytes are copied unchanged.
func (f modelField) withModel(body []byte, model string) []byte {
	quoted, _ := json.Marshal(model)
	out := make([]byte, 0, len(body)+len(f.spans)*(len(quoted)+2))
	prev := 0
	for _, s := range f.spans {
		out = append(out, body[prev:s[0]]...)
		out = append(out, quoted...)
		prev = s[1]
	}
	return append(out, body[prev:]...)
}

// apiError is the OpenAI-style error body of a local reply.
type apiError struct {
	Error apiErrorDetail `json:"error"`
}

type apiErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func errorBody(message, typ, code string) []byte {
	b, _ := json.Marshal(apiError{Error: apiErrorDetail{Message: message, Type: typ, Code: code}})
	return b
}
