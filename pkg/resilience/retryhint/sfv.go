package retryhint

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// errSyntax marks a malformed structured field; the whole field is then
// ignored, as the RateLimit draft requires.
var errSyntax = errors.New("malformed structured field")

// sfParam is one parameter of a structured-field item. Only integers are
// kept as numbers; other types are valid but opaque.
type sfParam struct {
	isInt bool
	n     int64
}

// parseRateLimitField reads the IETF RateLimit field (an RFC 9651 list
// such as `"default";r=0;t=30`) and returns the largest t of the items
// whose r is 0. A malformed field, or an r or t that is not an integer,
// voids the whole field.
func parseRateLimitField(vals []string) (time.Duration, bool) {
	if len(vals) == 0 {
		return 0, false
	}
	items, err := parseSFList(strings.Join(vals, ","))
	if err != nil {
		return 0, false
	}
	var acc hintAcc
	for _, params := range items {
		r, hasR := params["r"]
		t, hasT := params["t"]
		if (hasR && !r.isInt) || (hasT && !t.isInt) || r.n < 0 || t.n < 0 {
			return 0, false
		}
		if hasR && hasT && r.n == 0 {
			acc.add(min(time.Duration(min(t.n, int64(Max/time.Second)))*time.Second, Max), true)
		}
	}
	return acc.d, acc.ok
}

// sfParser walks a structured-field list.
type sfParser struct {
	s string
	i int
}

func parseSFList(s string) ([]map[string]sfParam, error) {
	p := &sfParser{s: strings.Trim(s, " \t")}
	var items []map[string]sfParam
	for p.i < len(p.s) {
		if err := p.bareItem(); err != nil {
			return nil, err
		}
		params, err := p.params()
		if err != nil {
			return nil, err
		}
		items = append(items, params)
		p.skipOWS()
		if p.i == len(p.s) {
			break
		}
		if p.s[p.i] != ',' {
			return nil, errSyntax
		}
		p.i++
		p.skipOWS()
		if p.i == len(p.s) {
			return nil, errSyntax // trailing comma
		}
	}
	return items, nil
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) params() (map[string]sfParam, error) {
	params := map[string]sfParam{}
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		for p.i < len(p.s) && p.s[p.i] == ' ' {
			p.i++
		}
		key := p.key()
		if key == "" {
			return nil, errSyntax
		}
		var v sfParam
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			start := p.i
			if err := p.bareItem(); err != nil {
				return nil, err
			}
			v = intParam(p.s[start:p.i])
		}
		params[key] = v
	}
	return params, nil
}

func intParam(raw string) sfParam {
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil && len(raw) <= 16 && !strings.HasPrefix(raw, "+") {
		return sfParam{isInt: true, n: n}
	}
	return sfParam{}
}

func (p *sfParser) key() string {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		first := p.i == start
		if (c >= 'a' && c <= 'z') || c == '*' || (!first && (c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.')) {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i]
}

// bareItem consumes one bare item of any RFC 9651 type.
func (p *sfParser) bareItem() error {
	if p.i >= len(p.s) {
		return errSyntax
	}
	switch c := p.s[p.i]; {
	case c == '"':
		return p.str()
	case c == ':':
		return p.bytes()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return nil
		}
		return errSyntax
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == '*' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
		p.token()
		return nil
	}
	return errSyntax
}

func (p *sfParser) str() error {
	for p.i++; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; {
		case c == '\\':
			p.i++
			if p.i >= len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return errSyntax
			}
		case c == '"':
			p.i++
			return nil
		case c < 0x20 || c > 0x7e:
			return errSyntax
		}
	}
	return errSyntax
}

func (p *sfParser) bytes() error {
	end := strings.IndexByte(p.s[p.i+1:], ':')
	if end < 0 {
		return errSyntax
	}
	for _, c := range p.s[p.i+1 : p.i+1+end] {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return errSyntax
		}
	}
	p.i += end + 2
	return nil
}

func (p *sfParser) number() error {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits, dot := 0, false
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c >= '0' && c <= '9' {
			digits++
		} else if c == '.' && !dot && digits > 0 {
			dot = true
		} else {
			break
		}
		p.i++
	}
	if digits == 0 || p.s[p.i-1] == '.' || (!dot && p.i-start > 16) {
		return errSyntax
	}
	return nil
}

func (p *sfParser) token() {
	for p.i++; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),;<=>?@[\]{}`, c) >= 0 {
			return
		}
	}
}
