package backfill

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// The chunk reader asks the source for
//
//	COPY (SELECT <columns>, <extras> ...) TO STDOUT (FORMAT binary)
//
// where the extras (the row's token, its primary key as text) tell where the
// chunk ended. splitChunk walks the binary stream once: it counts the tuples,
// keeps the extras of the last one, and rewrites every tuple without them, so
// the result can go as it is to COPY ... FROM STDIN (FORMAT binary) on the
// target. No value is decoded, whatever its type.

var copySignature = []byte("PGCOPY\n\xff\r\n\x00")

// chunkData is one chunk as read from the source.
type chunkData struct {
	data   []byte   // binary COPY stream of the table's columns
	rows   int      // tuples in data
	extras [][]byte // the extras of the last tuple (nil values for NULL)
}

// splitChunk parses src, a binary COPY stream whose tuples have nCols
// columns followed by nExtra extras.
func splitChunk(src []byte, nCols, nExtra int) (chunkData, error) {
	if len(src) < len(copySignature)+8 || !bytes.Equal(src[:len(copySignature)], copySignature) {
		return chunkData{}, errors.New("binary COPY stream: bad header")
	}
	p := len(copySignature) + 4 // signature, flags
	ext := int(binary.BigEndian.Uint32(src[p:]))
	p += 4 + ext
	if p > len(src) {
		return chunkData{}, errors.New("binary COPY stream: truncated header")
	}
	out := make([]byte, 0, len(src))
	out = append(out, src[:p]...)
	var c chunkData
	for {
		if p+2 > len(src) {
			return chunkData{}, errors.New("binary COPY stream: missing trailer")
		}
		n := int(int16(binary.BigEndian.Uint16(src[p:])))
		if n == -1 {
			out = append(out, 0xff, 0xff)
			c.data = out
			return c, nil
		}
		if n != nCols+nExtra {
			return chunkData{}, fmt.Errorf("binary COPY stream: tuple %d has %d fields, want %d", c.rows+1, n, nCols+nExtra)
		}
		p += 2
		start := p
		for i := 0; i < nCols; i++ {
			if p = skipField(src, p); p < 0 {
				return chunkData{}, fmt.Errorf("binary COPY stream: tuple %d truncated", c.rows+1)
			}
		}
		out = binary.BigEndian.AppendUint16(out, uint16(nCols))
		out = append(out, src[start:p]...)
		extras := make([][]byte, nExtra)
		for i := range extras {
			q := skipField(src, p)
			if q < 0 {
				return chunkData{}, fmt.Errorf("binary COPY stream: tuple %d truncated", c.rows+1)
			}
			if l := int32(binary.BigEndian.Uint32(src[p:])); l >= 0 {
				extras[i] = src[p+4 : q]
			}
			p = q
		}
		c.extras = extras
		c.rows++
	}
}

// skipField returns the offset after the field at p, or -1 if it overruns src.
func skipField(src []byte, p int) int {
	if p+4 > len(src) {
		return -1
	}
	l := int(int32(binary.BigEndian.Uint32(src[p:])))
	p += 4
	if l < 0 { // NULL
		return p
	}
	if p+l > len(src) {
		return -1
	}
	return p + l
}
