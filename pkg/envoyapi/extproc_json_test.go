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
		{``, "", "", false},
		{`{}`, "", "", false},
		{`{"mod\u0065l":"a","x":"model"}`, "b", `{"mod\u0065l":"b","x":"model"}`, true},
		{`{"x":"\"model\":\"n\"","model":"a"}`, "b", `{"x":"\"model\":\"n\"","model":"b"}`, true},
		{`{"x":"a\\","model":"a"}`, "b", `{"x":"a\\","model":"b"}`, true},
		{`{"model":"a","model":1}`, "", "", false},
		{`{"model":1,"model":"a"}`, "b", `{"model":1,"model":"b"}`, true},
		{`{"x":[{"model":"n"}],"y":[1,"]",{}]}`, "", "", false},
		// structure broken after the model: not JSON, no model
		{`{"model":"a"`, "", "", false},
		{`{"model":"a","messages":[{"content":"x"`, "", "", false},
		{`{"model":"a"} trailing`, "", "", false},
		{`{"model":"a",,"model":"c"}`, "", "", false},
		{`{"model":"a","x":[1,2}`, "", "", false},
		{`{"model":"a",}`, "", "", false},
		// whole structure, bad token after the model: kept byte-exact
		{`{"model":"a","x":tru,"y":"\q"}`, "b", `{"model":"b","x":tru,"y":"\q"}`, true},
		// broken before any model
		{`{"x":"open,"model":"a"`, "", "", false},
		{`{"x":[1,"model":"a"}`, "", "", false},
		{`{"model":"\q"}`, "", "", false},
	}
	for _, c := range cases {
		f, ok := findModel([]byte(c.in))
		if ok != c.ok {
			t.Errorf("%s: found %v, want %v", c.in, ok, c.ok)
			continue
		}
		if !ok {
			if f.value != "" || f.spans != nil {
				t.Errorf("%s: no model, but the field holds %q %v", c.in, f.value, f.spans)
			}
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
	f.Add([]byte(`{"model":"a","messages":[{"content":"x`), "b")
	f.Fuzz(func(t *testing.T, body []byte, model string) {
		mf, ok := findModel(body)
		var before map[string]any
		valid := json.Unmarshal(body, &before) == nil
		if valid {
			want, isStr := before["model"].(string)
			if ok != isStr || (ok && want != mf.value) {
				t.Fatalf("found %q (%v), decoder says %v", mf.value, ok, before["model"])
			}
		}
		if !ok {
			return
		}
		if !valid {
			brokenRewrite(t, body, mf, model)
			return
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

// brokenRewrite checks the rewrite of a body that is not JSON: the
// model's value replaced, every other byte as sent.
func brokenRewrite(t *testing.T, body []byte, mf modelField, model string) {
	t.Helper()
	quoted, _ := json.Marshal(model)
	out := mf.withModel(body, model)
	prev, at := 0, 0
	for _, s := range mf.spans {
		gap := s[0] - prev
		if string(out[at:at+gap]) != string(body[prev:s[0]]) || string(out[at+gap:at+gap+len(quoted)]) != string(quoted) {
			t.Fatalf("rewrite of %q changed more than the model: %q", body, out)
		}
		at += gap + len(quoted)
		prev = s[1]
	}
	if string(out[at:]) != string(body[prev:]) {
		t.Fatalf("rewrite of %q changed its tail: %q", body, out)
	}
}

func validUTF8(s string) bool {
	b, _ := json.Marshal(s)
	var back string
	return json.Unmarshal(b, &back) == nil && back == s
}
