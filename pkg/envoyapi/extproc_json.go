package envoyapi

import (
	"bytes"
	"encoding/json"
)

// modelField locates the top-level "model" string of a JSON object body.
// A body that is not a JSON object, or whose model is not a string, has
// none. When the key repeats, the last value is the model (as JSON
// decoders read it) and every string occurrence is rewritten.
type modelField struct {
	value string
	spans [][2]int // byte ranges of the quoted values, in order
}

// findModel walks the top-level members of body without validating or
// building them: a value other than the model is skipped by its quotes
// and brackets alone, so a long prompt costs a search for its closing
// quote. Only the keys and the model's value are decoded. The walk goes
// on after the model to the end of the object, since a later duplicate
// is the one a provider reads.
//
// A body whose structure is broken anywhere (truncated, brackets that
// do not close, a stray byte between members, anything after the
// object) is not JSON and has no model, as service.md wants for non-JSON
// bodies: it passes untouched. The tokens inside skipped values are not
// checked: a body whole in its structure but with a bad token after the
// model (a bad escape or a control byte in a prompt, a misspelt true)
// keeps its model, and a rewrite changes the model's value only, so the
// provider sees it exactly as broken as the client sent it. Valid JSON
// stays valid. A model value that does not decode as a string counts as
// no string. Without a model the field is empty.
func findModel(body []byte) (modelField, bool) {
	if f, ok := scanModel(body); ok {
		return f, true
	}
	return modelField{}, false
}

// scanModel is findModel's walk; on false f holds what it saw.
func scanModel(body []byte) (modelField, bool) {
	var f modelField
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return f, false
	}
	last := false // the last model value seen is a string
	if i = skipSpace(body, i+1); i < len(body) && body[i] == '}' {
		return f, false
	}
	for i < len(body) && body[i] == '"' {
		key, end, ok := readKey(body, i)
		if !ok {
			return f, false
		}
		if i = skipSpace(body, end); i >= len(body) || body[i] != ':' {
			return f, false
		}
		i = skipSpace(body, i+1)
		if end = skipValue(body, i); end < 0 {
			return f, false
		}
		if key {
			last = f.take(body, i, end)
		}
		if i = skipSpace(body, end); i < len(body) && body[i] == '}' {
			return f, last && skipSpace(body, i+1) == len(body)
		}
		if i >= len(body) || body[i] != ',' {
			return f, false
		}
		i = skipSpace(body, i+1)
	}
	return f, false
}

// take records the model value at body[i:end] and reports whether it is
// a string.
func (f *modelField) take(body []byte, i, end int) bool {
	if body[i] != '"' {
		return false
	}
	var v string
	if json.Unmarshal(body[i:end], &v) != nil {
		return false
	}
	f.value = v
	f.spans = append(f.spans, [2]int{i, end})
	return true
}

// readKey reads the member key starting at the quote body[i]: whether
// it is "model" (escapes decoded) and where it ends.
func readKey(body []byte, i int) (isModel bool, end int, ok bool) {
	end = skipString(body, i)
	if end < 0 {
		return false, 0, false
	}
	raw := body[i+1 : end-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == "model", end, true
	}
	var k string
	if json.Unmarshal(body[i:end], &k) != nil {
		return false, 0, false
	}
	return k == "model", end, true
}

// skipSpace skips JSON white space from i.
func skipSpace(body []byte, i int) int {
	for i < len(body) {
		switch body[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the end of the string whose opening quote is
// body[i], -1 when it is not closed. A quote ends the string unless an
// odd number of backslashes comes before it.
func skipString(body []byte, i int) int {
	for j := i + 1; ; {
		q := bytes.IndexByte(body[j:], '"')
		if q < 0 {
			return -1
		}
		j += q
		n := 0
		for k := j - 1; k > i && body[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// skipValue returns the end of the value starting at body[i] (after
// white space), -1 when it is not closed: a string by its quotes, an
// object or array by its brackets (strings inside skipped whole), any
// other token up to the next delimiter. Nothing is validated.
func skipValue(body []byte, i int) int {
	if i >= len(body) {
		return -1
	}
	switch body[i] {
	case '"':
		return skipString(body, i)
	case '{', '[':
		return skipNested(body, i)
	case ',', '}', ']', ':':
		return -1
	}
	for j := i; j < len(body); j++ {
		switch body[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
	}
	return len(body)
}

// skipNested returns the end of the object or array opening at body[i].
// Brackets are counted, not matched: findModel does not validate.
func skipNested(body []byte, i int) int {
	depth := 0
	for j := i; j < len(body); j++ {
		switch body[j] {
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return j + 1
			}
		case '"':
			end := skipString(body, j)
			if end < 0 {
				return -1
			}
			j = end - 1
		}
	}
	return -1
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
