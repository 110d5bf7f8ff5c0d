package llmusage

import "bytes"

// DefaultMaxEvent is a Parser's cap on one event's size when MaxEvent is
// zero. Usage and error events are a few hundred bytes; a content chunk
// above the cap is skipped without loss of usage.
const DefaultMaxEvent = 64 << 10

// maxName bounds an event name; a longer name matches no known event.
const maxName = 64

var bom = [3]byte{0xEF, 0xBB, 0xBF}

// Parser reads a text/event-stream response as it passes, in chunks of any
// split, and keeps its usage, its end marker and its first error event.
// It holds at most one event: its data so far and the line being read,
// together never more than MaxEvent bytes. An event that would need more
// is skipped up to its blank line and counted in Stats.Oversized, the
// same way however the stream is split. A comment line (":…") is never
// buffered, whatever its length.
//
// The zero value is ready to use. A Parser reads one stream; it is not
// safe for concurrent use.
type Parser struct {
	// MaxEvent caps one event's buffered bytes; 0 means DefaultMaxEvent.
	// Set it before the first Write.
	MaxEvent int

	buf     []byte // the event's data (dataLen bytes), then the line being read (lineLen)
	dataLen int
	lineLen int
	name    [maxName]byte
	nameLen int  // -1: the name was longer than maxName
	discard bool // drop the rest of the current line
	skip    bool // the event is oversized: ignore it up to its blank line
	afterCR bool // the last line ended in CR: a leading LF belongs to it
	bomSeen int  // bytes of a leading byte order mark matched so far
	bomDone bool

	st      streamState
	onEvent func(name, data []byte) // test hook: every dispatched event
}

// Write feeds the next chunk of the stream. It never fails and never
// keeps a reference to chunk; the error is for io.Writer.
func (p *Parser) Write(chunk []byte) (int, error) {
	n := len(chunk)
	for !p.bomDone && len(chunk) > 0 {
		if chunk[0] == bom[p.bomSeen] {
			chunk = chunk[1:]
			if p.bomSeen++; p.bomSeen == len(bom) {
				p.bomDone = true
			}
			continue
		}
		p.bomDone = true
		p.feed(bom[:p.bomSeen])
	}
	p.feed(chunk)
	return n, nil
}

func (p *Parser) limit() int {
	if p.MaxEvent > 0 {
		return p.MaxEvent
	}
	return DefaultMaxEvent
}

// feed splits b into lines; a line may end in CR, LF or CRLF, and any of
// them may fall on a chunk boundary.
func (p *Parser) feed(b []byte) {
	for len(b) > 0 {
		if p.afterCR {
			p.afterCR = false
			if b[0] == '\n' {
				b = b[1:]
				continue
			}
		}
		end := bytes.IndexByte(b, '\n')
		scan := b
		if end >= 0 {
			scan = b[:end]
		}
		if cr := bytes.IndexByte(scan, '\r'); cr >= 0 {
			end = cr
			p.afterCR = true
		}
		if end < 0 {
			p.hold(b)
			return
		}
		p.endLine(b[:end])
		b = b[end+1:]
	}
}

// hold keeps the start of a line that continues in the next chunk.
func (p *Parser) hold(part []byte) {
	switch {
	case p.discard:
	case p.lineLen == 0 && part[0] == ':': // a comment: never needed
		p.discard = true
	case p.skip:
		p.discard = true
	case p.dataLen+p.lineLen+len(part) > p.limit():
		p.oversize()
		p.discard = true
	default:
		p.grow(p.dataLen + p.lineLen + len(part))
		copy(p.buf[p.dataLen+p.lineLen:], part)
		p.lineLen += len(part)
	}
}

// endLine completes the current line with its last part.
func (p *Parser) endLine(last []byte) {
	if p.discard {
		p.discard = false
		return
	}
	if p.lineLen == 0 {
		p.line(last, false)
		return
	}
	held := p.dataLen + p.lineLen
	if held+len(last) > p.limit() {
		p.oversize()
		return
	}
	p.grow(held + len(last))
	p.lineLen = 0
	copy(p.buf[held:], last)
	p.line(p.buf[p.dataLen:held+len(last)], true)
}

// line interprets one line; inBuf says it lies in buf just after the data.
func (p *Parser) line(l []byte, inBuf bool) {
	if len(l) == 0 {
		p.endEvent()
		return
	}
	if p.skip || l[0] == ':' {
		return
	}
	if !inBuf && p.dataLen+len(l) > p.limit() { // as if the line had been held
		p.oversize()
		return
	}
	field, value := l, l[len(l):]
	if i := bytes.IndexByte(l, ':'); i >= 0 {
		field, value = l[:i], l[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "data":
		need := p.dataLen + len(value) + 1 // ≤ dataLen+len(l): fits
		if !inBuf {
			p.grow(need)
		}
		copy(p.buf[p.dataLen:], value) // in buf, value lies above dataLen: copy moves it down
		p.buf[need-1] = '\n'
		p.dataLen = need
	case "event":
		p.nameLen = -1
		if len(value) <= maxName {
			p.nameLen = copy(p.name[:], value)
		}
	}
}

// endEvent dispatches the event a blank line ends, if it has data.
func (p *Parser) endEvent() {
	if !p.skip && p.dataLen > 0 {
		var name []byte
		if p.nameLen > 0 {
			name = p.name[:p.nameLen]
		}
		p.dispatch(name, p.nameLen < 0, p.buf[:p.dataLen-1])
	}
	p.skip = false
	p.dataLen = 0
	p.nameLen = 0
}

// oversize drops the current event and skips the rest of it.
func (p *Parser) oversize() {
	if !p.skip {
		p.st.stats.Oversized++
	}
	p.skip = true
	p.dataLen, p.lineLen = 0, 0
}

// grow makes buf hold n bytes, growing it at most to the limit.
func (p *Parser) grow(n int) {
	if n <= len(p.buf) {
		return
	}
	size := min(max(n, 2*len(p.buf), 512), p.limit())
	b := make([]byte, size)
	copy(b, p.buf[:p.dataLen+p.lineLen])
	p.buf = b
}

// buffered is the parser's event memory, for tests of the bound.
func (p *Parser) buffered() int { return cap(p.buf) }
