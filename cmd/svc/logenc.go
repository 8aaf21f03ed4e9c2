package main

import (
	"math"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
)

// fastConsole is zap's console encoder with the development encoder
// configuration (what --log-format console, the default, writes), with a
// fast path for the lines svc serve writes per request and per runtime
// event: message, caller and fields of the plain kinds (strings, integers,
// floats, booleans, durations) are appended straight into the line, where
// zap's console encoder formats each metadata item into a string boxed in
// an interface, prints it with fmt and encodes the fields through a
// cloned JSON encoder (issue 15: about a tenth of the server's CPU went
// to its three log lines a run). The bytes are the same as zap's
// (TestFastConsoleMatchesZap compares them); a line with anything else (a
// named logger, a stack, context added with With, a field of another
// kind) is left to zap's encoder.
type fastConsole struct {
	zapcore.Encoder      // zap's console encoder: context, and every other line
	ctx             bool // context fields were added: leave the line to zap
}

// isoLayout is zapcore.ISO8601TimeEncoder's layout.
const isoLayout = "2006-01-02T15:04:05.000Z0700"

var linePool = buffer.NewPool()

// newFastConsole returns the console encoder of cfg, which must be
// zap.NewDevelopmentEncoderConfig()'s (logConfig's for console).
func newFastConsole(cfg zapcore.EncoderConfig) zapcore.Encoder {
	return &fastConsole{Encoder: zapcore.NewConsoleEncoder(cfg)}
}

func (e *fastConsole) Clone() zapcore.Encoder {
	return &fastConsole{Encoder: e.Encoder.Clone(), ctx: e.ctx}
}

// fastField reports whether the fast path encodes f as zap's JSON
// encoder does.
func fastField(f zapcore.Field) bool {
	switch f.Type {
	case zapcore.StringType, zapcore.Int64Type, zapcore.Int32Type, zapcore.Float64Type, zapcore.BoolType, zapcore.DurationType:
		return true
	}
	return false
}

func (e *fastConsole) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	if e.ctx || ent.LoggerName != "" || ent.Stack != "" {
		return e.Encoder.EncodeEntry(ent, fields)
	}
	for _, f := range fields {
		if !fastField(f) {
			return e.Encoder.EncodeEntry(ent, fields)
		}
	}
	line := linePool.Get()
	if !ent.Time.IsZero() {
		appendTime(line, ent.Time)
		line.AppendByte('\t')
	}
	line.AppendString(ent.Level.CapitalString())
	if ent.Caller.Defined {
		line.AppendByte('\t')
		appendCaller(line, ent.Caller)
	}
	line.AppendByte('\t')
	line.AppendString(ent.Message)
	if len(fields) > 0 {
		line.AppendString("\t{")
		for i, f := range fields {
			if i > 0 {
				line.AppendString(", ")
			}
			line.AppendByte('"')
			appendJSONString(line, f.Key)
			line.AppendString(`": `)
			switch f.Type {
			case zapcore.StringType:
				line.AppendByte('"')
				appendJSONString(line, f.String)
				line.AppendByte('"')
			case zapcore.Int64Type, zapcore.Int32Type:
				line.AppendInt(f.Integer)
			case zapcore.BoolType:
				line.AppendBool(f.Integer == 1)
			case zapcore.Float64Type:
				switch v := math.Float64frombits(uint64(f.Integer)); {
				case math.IsNaN(v):
					line.AppendString(`"NaN"`)
				case math.IsInf(v, 1):
					line.AppendString(`"+Inf"`)
				case math.IsInf(v, -1):
					line.AppendString(`"-Inf"`)
				default:
					line.AppendFloat(v, 64)
				}
			case zapcore.DurationType:
				line.AppendByte('"')
				appendJSONString(line, time.Duration(f.Integer).String())
				line.AppendByte('"')
			}
		}
		line.AppendByte('}')
	}
	line.AppendByte('\n')
	return line, nil
}

// lastSecond is the time of the last line, formatted with isoLayout,
// whole seconds: lines within the same second in the same zone take it
// and write their milliseconds in place of its ".000".
var lastSecond atomic.Pointer[formattedSecond]

type formattedSecond struct {
	unix int64
	loc  *time.Location
	text string // ends in ".000" and the zone
}

// appendTime appends t as zapcore.ISO8601TimeEncoder writes it.
func appendTime(line *buffer.Buffer, t time.Time) {
	sec, loc := t.Unix(), t.Location()
	f := lastSecond.Load()
	if f == nil || f.unix != sec || f.loc != loc {
		text := t.Truncate(time.Second).Format(isoLayout)
		if len(text) < 24 || text[19] != '.' {
			line.AppendTime(t, isoLayout) // a year of more than four digits
			return
		}
		f = &formattedSecond{unix: sec, loc: loc, text: text}
		lastSecond.Store(f)
	}
	ms := t.Nanosecond() / 1e6
	line.AppendString(f.text[:20])
	line.AppendByte(byte('0' + ms/100))
	line.AppendByte(byte('0' + ms/10%10))
	line.AppendByte(byte('0' + ms%10))
	line.AppendString(f.text[23:])
}

// appendCaller is zapcore.ShortCallerEncoder's text (EntryCaller.
// TrimmedPath) without its string.
func appendCaller(line *buffer.Buffer, c zapcore.EntryCaller) {
	i := strings.LastIndexByte(c.File, '/')
	if i >= 0 {
		i = strings.LastIndexByte(c.File[:i], '/')
	}
	if i < 0 {
		line.AppendString(c.FullPath())
		return
	}
	line.AppendString(c.File[i+1:])
	line.AppendByte(':')
	line.AppendInt(int64(c.Line))
}

const hexDigits = "0123456789abcdef"

// appendJSONString is zap's JSON escaping of s (jsonEncoder.safeAddString):
// '"', '\\' and control characters escaped, invalid UTF-8 as \ufffd, the
// rest as is.
func appendJSONString(line *buffer.Buffer, s string) {
	last := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			line.AppendString(s[last:i])
			line.AppendString(`\ufffd`)
			i++
			last = i
			continue
		}
		if c >= 0x20 && c != '\\' && c != '"' {
			i++
			continue
		}
		line.AppendString(s[last:i])
		switch c {
		case '\\', '"':
			line.AppendByte('\\')
			line.AppendByte(c)
		case '\n':
			line.AppendString(`\n`)
		case '\r':
			line.AppendString(`\r`)
		case '\t':
			line.AppendString(`\t`)
		default:
			line.AppendString(`\u00`)
			line.AppendByte(hexDigits[c>>4])
			line.AppendByte(hexDigits[c&0xF])
		}
		i++
		last = i
	}
	line.AppendString(s[last:])
}

// The ObjectEncoder methods add context (logger.With): such an encoder's
// lines are zap's.

func (e *fastConsole) AddArray(k string, v zapcore.ArrayMarshaler) error {
	e.ctx = true
	return e.Encoder.AddArray(k, v)
}

func (e *fastConsole) AddObject(k string, v zapcore.ObjectMarshaler) error {
	e.ctx = true
	return e.Encoder.AddObject(k, v)
}
func (e *fastConsole) AddBinary(k string, v []byte)     { e.ctx = true; e.Encoder.AddBinary(k, v) }
func (e *fastConsole) AddByteString(k string, v []byte) { e.ctx = true; e.Encoder.AddByteString(k, v) }
func (e *fastConsole) AddBool(k string, v bool)         { e.ctx = true; e.Encoder.AddBool(k, v) }
func (e *fastConsole) AddComplex128(k string, v complex128) {
	e.ctx = true
	e.Encoder.AddComplex128(k, v)
}
func (e *fastConsole) AddComplex64(k string, v complex64) { e.ctx = true; e.Encoder.AddComplex64(k, v) }
func (e *fastConsole) AddDuration(k string, v time.Duration) {
	e.ctx = true
	e.Encoder.AddDuration(k, v)
}
func (e *fastConsole) AddFloat64(k string, v float64) { e.ctx = true; e.Encoder.AddFloat64(k, v) }
func (e *fastConsole) AddFloat32(k string, v float32) { e.ctx = true; e.Encoder.AddFloat32(k, v) }
func (e *fastConsole) AddInt(k string, v int)         { e.ctx = true; e.Encoder.AddInt(k, v) }
func (e *fastConsole) AddInt64(k string, v int64)     { e.ctx = true; e.Encoder.AddInt64(k, v) }
func (e *fastConsole) AddInt32(k string, v int32)     { e.ctx = true; e.Encoder.AddInt32(k, v) }
func (e *fastConsole) AddInt16(k string, v int16)     { e.ctx = true; e.Encoder.AddInt16(k, v) }
func (e *fastConsole) AddInt8(k string, v int8)       { e.ctx = true; e.Encoder.AddInt8(k, v) }
func (e *fastConsole) AddString(k, v string)          { e.ctx = true; e.Encoder.AddString(k, v) }
func (e *fastConsole) AddTime(k string, v time.Time)  { e.ctx = true; e.Encoder.AddTime(k, v) }
func (e *fastConsole) AddUint(k string, v uint)       { e.ctx = true; e.Encoder.AddUint(k, v) }
func (e *fastConsole) AddUint64(k string, v uint64)   { e.ctx = true; e.Encoder.AddUint64(k, v) }
func (e *fastConsole) AddUint32(k string, v uint32)   { e.ctx = true; e.Encoder.AddUint32(k, v) }
func (e *fastConsole) AddUint16(k string, v uint16)   { e.ctx = true; e.Encoder.AddUint16(k, v) }
func (e *fastConsole) AddUint8(k string, v uint8)     { e.ctx = true; e.Encoder.AddUint8(k, v) }
func (e *fastConsole) AddUintptr(k string, v uintptr) { e.ctx = true; e.Encoder.AddUintptr(k, v) }
func (e *fastConsole) AddReflected(k string, v any) error {
	e.ctx = true
	return e.Encoder.AddReflected(k, v)
}
func (e *fastConsole) OpenNamespace(k string) { e.ctx = true; e.Encoder.OpenNamespace(k) }
