package envoyapi

import (
	"encoding/json"
	"testing"
)

func TestFindModelSplice(t *testing.T) {
	cases := []struct {
		in, model, want string
		ok              bool
	}{
		{`{"model":"a"}`, "bb", `{"model":"bb"}`, true},
		{"{ \"model\" :\n \"a\" ,\"x\":[1,{\"model\":\"n\"}]}", "b", "{ \"model\" :\n \"b\" ,\"x\":[1,{\"model\":\"n\"}]}", true},
		{`{"x":{"model":"n"},"model":"a\u0041"}`, "m", `{"x":{"model":"n"},"model":"m"}`, true},
		{`{"model":"a","model":"b"}`, "c", `{"model":"c","model":"c"}`, true},
		{`{"model":"a"}`, `q"<&>`, `{"model":"q\"\u003c\u0026\u003e"}`, true},
		{`{"model":1}`, "", "", false},
		{`{"model":null}`, "", "", false},
		{`["model"]`, "", "", false},
		{`{"model":"a"`, "", "", false},
		{``, "", "", false},
		{`{}`, "", "", false},
	}
	for _, c := range cases {
		f, ok := findModel([]byte(c.in))
		if ok != c.ok {
			t.Errorf("%s: found %v, want %v", c.in, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		if got := string(f.withModel([]byte(c.in), c.model)); got != c.want {
			t.Errorf("%s: got %s, want %s", c.in, got, c.want)
		}
	}
}

func FuzzFindModel(f *testing.F) {
	f.Add([]byte(`{"model":"a","x":{"model":"b"}}`), "m")
	f.Add([]byte(`{"a":[1,2,{"b":"c"}],"model" : "\u00e9"}`), "ü")
	f.Fuzz(func(t *testing.T, body []byte, model string) {
		mf, ok := findModel(body)
		if !ok {
			return
		}
		var before map[string]any
		if err := json.Unmarshal(body, &before); err != nil || before["model"] != mf.value {
			t.Fatalf("found %q, decoder says %v (%v)", mf.value, before["model"], err)
		}
		out := mf.withModel(body, model)
		var after map[string]any
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("rewrite of %q is not JSON: %v", body, err)
		}
		if m, _ := after["model"].(string); validUTF8(model) && m != model {
			t.Fatalf("model %q after rewrite, want %q", m, model)
		}
		again, ok := findModel(out)
		if !ok || len(again.spans) != len(mf.spans) {
			t.Fatalf("rewrite lost the model field")
		}
	})
}

func validUTF8(s string) bool {
	b, _ := json.Marshal(s)
	var back string
	return json.Unmarshal(b, &back) == nil && back == s
}
