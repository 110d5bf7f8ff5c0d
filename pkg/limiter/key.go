package limiter

// Keys are built from parts separated by '|'; a descriptor entry is one
// part "key=value". The bytes '|', '=' and '\\' inside a part are escaped
// with '\\', so distinct part lists never make one key (a value "a|b=c"
// cannot pose as two entries) and keys stay readable for operators:
//
//	api|api_key=k1|fixed_window;10/60000000000

// AppendPart appends one part to a key under construction.
func AppendPart(dst []byte, part string) []byte {
	if len(dst) > 0 {
		dst = append(dst, '|')
	}
	return appendEscaped(dst, part)
}

// AppendEntry appends the part "key=value".
func AppendEntry(dst []byte, key, value string) []byte {
	dst = AppendPart(dst, key)
	dst = append(dst, '=')
	return appendEscaped(dst, value)
}

func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '|' || c == '=' || c == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return dst
}
