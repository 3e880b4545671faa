package ring

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
)

// The token functions below are a bit-exact port of PostgreSQL's Jenkins
// lookup3 hashing (src/common/hashfn.c: hash_bytes_extended and
// hash_bytes_uint32_extended) as used by the extended hash support functions
// of hash partitioning, with seed 0. PostgreSQL reads the key a word at a time
// in machine byte order; these are the little-endian results (x86-64, arm64),
// which is what every server we support computes. The vectors in
// testdata/tokens.json and the comparison against a live server keep them
// honest.

const lookup3Init = 0x9e3779b9 + 3923095

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func final(a, b, c uint32) (uint32, uint32) {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return b, c
}

// hashBytesExtended is hash_bytes_extended(k, len(k), 0) on a little-endian
// machine. (Seed 0 skips the seed mixing step.)
func hashBytesExtended(k []byte) uint64 {
	a := uint32(lookup3Init) + uint32(len(k))
	b, c := a, a
	for len(k) >= 12 {
		a += binary.LittleEndian.Uint32(k[0:])
		b += binary.LittleEndian.Uint32(k[4:])
		c += binary.LittleEndian.Uint32(k[8:])
		a, b, c = mix(a, b, c)
		k = k[12:]
	}
	// The last 0..11 bytes: little-endian into a, b and the upper three
	// bytes of c (its lowest byte is reserved for the length in lookup3).
	switch len(k) {
	case 11:
		c += uint32(k[10]) << 24
		fallthrough
	case 10:
		c += uint32(k[9]) << 16
		fallthrough
	case 9:
		c += uint32(k[8]) << 8
		fallthrough
	case 8:
		b += uint32(k[7]) << 24
		fallthrough
	case 7:
		b += uint32(k[6]) << 16
		fallthrough
	case 6:
		b += uint32(k[5]) << 8
		fallthrough
	case 5:
		b += uint32(k[4])
		fallthrough
	case 4:
		a += uint32(k[3]) << 24
		fallthrough
	case 3:
		a += uint32(k[2]) << 16
		fallthrough
	case 2:
		a += uint32(k[1]) << 8
		fallthrough
	case 1:
		a += uint32(k[0])
	}
	hb, hc := final(a, b, c)
	return uint64(hb)<<32 | uint64(hc)
}

// hashStringExtended is hashBytesExtended over a string's bytes without
// copying them (the words are read from the string directly).
func hashStringExtended(s string) uint64 {
	a := uint32(lookup3Init) + uint32(len(s))
	b, c := a, a
	for len(s) >= 12 {
		a += le32(s[0:4])
		b += le32(s[4:8])
		c += le32(s[8:12])
		a, b, c = mix(a, b, c)
		s = s[12:]
	}
	switch len(s) {
	case 11:
		c += uint32(s[10]) << 24
		fallthrough
	case 10:
		c += uint32(s[9]) << 16
		fallthrough
	case 9:
		c += uint32(s[8]) << 8
		fallthrough
	case 8:
		b += uint32(s[7]) << 24
		fallthrough
	case 7:
		b += uint32(s[6]) << 16
		fallthrough
	case 6:
		b += uint32(s[5]) << 8
		fallthrough
	case 5:
		b += uint32(s[4])
		fallthrough
	case 4:
		a += uint32(s[3]) << 24
		fallthrough
	case 3:
		a += uint32(s[2]) << 16
		fallthrough
	case 2:
		a += uint32(s[1]) << 8
		fallthrough
	case 1:
		a += uint32(s[0])
	}
	hb, hc := final(a, b, c)
	return uint64(hb)<<32 | uint64(hc)
}

func le32(s string) uint32 {
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// hashUint32Extended is hash_bytes_uint32_extended(k, 0).
func hashUint32Extended(k uint32) uint64 {
	a := uint32(lookup3Init) + 4
	b, c := a, a
	a += k
	hb, hc := final(a, b, c)
	return uint64(hb)<<32 | uint64(hc)
}

// TokenInt64 is hashint8extended(k, 0), the token of a smallint, integer or
// bigint key. For values in the int32 range it equals hashint4extended(k, 0),
// so a table set may mix integer widths.
func TokenInt64(k int64) int64 {
	// hashint8extended folds the high half into the low half so that
	// int8 values equal to int4 values hash the same: for k >= 0 the high
	// half is 0, for negative int32 values it is all ones and ~hi is 0.
	lo, hi := uint32(k), uint32(uint64(k)>>32)
	if k >= 0 {
		lo ^= hi
	} else {
		lo ^= ^hi
	}
	return int64(hashUint32Extended(lo))
}

// TokenText is hashtextextended(s, 0) under a deterministic collation (the
// hash of the UTF-8 bytes), the token of a text or varchar key.
func TokenText(s string) int64 { return int64(hashStringExtended(s)) }

// TokenUUID is uuid_hash_extended(u, 0), the token of a uuid key given as its
// 16 bytes in the usual (RFC 4122, network) order.
func TokenUUID(u [16]byte) int64 { return int64(hashBytesExtended(u[:])) }

// TokenOf computes the token of a key given in PostgreSQL's text output form,
// as pgoutput sends it: "42", "abc", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11".
func TokenOf(kt KeyType, text string) (int64, error) {
	switch kt {
	case KeyInt:
		v, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("token of integer key %q: %w", text, err)
		}
		return TokenInt64(v), nil
	case KeyText:
		return TokenText(text), nil
	case KeyUUID:
		u, err := ParseUUID(text)
		if err != nil {
			return 0, fmt.Errorf("token of uuid key: %w", err)
		}
		return TokenUUID(u), nil
	}
	return 0, fmt.Errorf("token of key %q: unknown key type %q (want %s, %s or %s)", text, kt, KeyInt, KeyText, KeyUUID)
}

// ParseUUID reads a uuid in the forms PostgreSQL's uuid_in accepts: 32 hex
// digits, upper or lower case, optionally in braces, with an optional hyphen
// after any group of four digits (the canonical output form is
// "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").
func ParseUUID(s string) ([16]byte, error) {
	var u [16]byte
	src := s
	braces := len(src) > 0 && src[0] == '{'
	if braces {
		src = src[1:]
	}
	for i := 0; i < 16; i++ {
		if len(src) < 2 {
			return u, fmt.Errorf("uuid %q: too short", s)
		}
		hi, ok1 := unhex(src[0])
		lo, ok2 := unhex(src[1])
		if !ok1 || !ok2 {
			return u, fmt.Errorf("uuid %q: invalid hex digit", s)
		}
		u[i] = hi<<4 | lo
		src = src[2:]
		if i%2 == 1 && i < 15 && len(src) > 0 && src[0] == '-' {
			src = src[1:]
		}
	}
	if braces {
		if len(src) == 0 || src[0] != '}' {
			return u, fmt.Errorf("uuid %q: missing closing brace", s)
		}
		src = src[1:]
	}
	if len(src) != 0 {
		return u, fmt.Errorf("uuid %q: trailing characters", s)
	}
	return u, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// FormatUUID renders u in PostgreSQL's output form.
func FormatUUID(u [16]byte) string {
	const hexd = "0123456789abcdef"
	b := make([]byte, 0, 36)
	for i, x := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexd[x>>4], hexd[x&15])
	}
	return string(b)
}
