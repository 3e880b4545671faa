package cdc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// This file is the pure half of the stream: pgoutput bytes in, typed messages
// out, no I/O. It follows pglogrepl's message layout (and its fuzz test uses
// pglogrepl.ParseV2 as an oracle) but checks every length, so a truncated or
// corrupt message is an error rather than a panic, and it copies each change
// once instead of once per column.

// Message is one decoded pgoutput message: *Begin, *Commit, *Origin,
// *Relation, *TypeInfo, *Change, *Truncate, *LogicalMessage, *StreamStart,
// *StreamStop, *StreamCommit or *StreamAbort.
type Message interface{ msg() }

// Begin opens a transaction; FinalLSN is the LSN of its commit record.
type Begin struct {
	FinalLSN   pglogrepl.LSN
	CommitTime time.Time
	Xid        uint32
}

// Commit closes a transaction. EndLSN is the end of its commit record: the
// position to record and acknowledge once it is applied.
type Commit struct {
	Flags      uint8
	CommitLSN  pglogrepl.LSN
	EndLSN     pglogrepl.LSN
	CommitTime time.Time
}

// Origin follows Begin when the transaction was written under a replication
// origin (by an applier such as ours).
type Origin struct {
	CommitLSN pglogrepl.LSN
	Name      string
}

// RelationColumn is one column as the source publishes it.
type RelationColumn struct {
	Name    string
	TypeOID uint32
	TypeMod int32
	Key     bool // part of the replica identity
}

// Relation describes a table before its first change in a session and again
// after any DDL on it.
type Relation struct {
	ID              uint32
	Namespace       string
	Name            string
	ReplicaIdentity byte // d, f, i or n
	Columns         []RelationColumn
}

// String is schema.table.
func (r *Relation) String() string { return r.Namespace + "." + r.Name }

// TypeInfo names a non-built-in type used by a relation.
type TypeInfo struct {
	OID       uint32
	Namespace string
	Name      string
}

// Column kinds in a tuple, as pgoutput sends them.
const (
	ColNull      byte = 'n'
	ColUnchanged byte = 'u' // unchanged TOASTed value: not sent
	ColText      byte = 't'
	ColBinary    byte = 'b'
)

// Col is one column value of a tuple. Data is valid for ColText and ColBinary.
type Col struct {
	Kind byte
	Data []byte
}

// Tuple is a row image in the relation's column order.
type Tuple []Col

// ChangeKind is the kind of a row change.
type ChangeKind byte

// Change kinds, with pgoutput's message bytes.
const (
	Insert ChangeKind = 'I'
	Update ChangeKind = 'U'
	Delete ChangeKind = 'D'
)

func (k ChangeKind) String() string {
	switch k {
	case Insert:
		return "insert"
	case Update:
		return "update"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("change(%q)", byte(k))
}

// Change is one row change. Old is set for DELETE and for an UPDATE that
// changed the replica identity (OldKind 'K': identity columns only, the others
// null) or of a REPLICA IDENTITY FULL table (OldKind 'O'); New is set for
// INSERT and UPDATE.
type Change struct {
	Kind    ChangeKind
	Rel     *Relation
	Xid     uint32 // only inside a streamed transaction
	OldKind byte
	Old     Tuple
	New     Tuple
}

// Truncate lists truncated relations. reshard never publishes TRUNCATE; the
// applier refuses it.
type Truncate struct {
	Xid     uint32
	Options uint8
	Rels    []*Relation
}

// LogicalMessage is a pg_logical_emit_message; reshard's markers use the
// prefix "reshard".
type LogicalMessage struct {
	Xid           uint32
	Transactional bool
	LSN           pglogrepl.LSN
	Prefix        string
	Content       []byte
}

// StreamStart, StreamStop, StreamCommit and StreamAbort frame the chunks of
// an in-progress transaction when streaming is on (proto_version 2).
type StreamStart struct {
	Xid          uint32
	FirstSegment bool
}

// StreamStop ends a chunk of a streamed transaction.
type StreamStop struct{}

// StreamCommit commits a streamed transaction.
type StreamCommit struct {
	Xid        uint32
	Flags      uint8
	CommitLSN  pglogrepl.LSN
	EndLSN     pglogrepl.LSN
	CommitTime time.Time
}

// StreamAbort aborts a streamed (sub)transaction.
type StreamAbort struct {
	Xid    uint32
	SubXid uint32
}

func (*Begin) msg()          {}
func (*Commit) msg()         {}
func (*Origin) msg()         {}
func (*Relation) msg()       {}
func (*TypeInfo) msg()       {}
func (*Change) msg()         {}
func (*Truncate) msg()       {}
func (*LogicalMessage) msg() {}
func (*StreamStart) msg()    {}
func (*StreamStop) msg()     {}
func (*StreamCommit) msg()   {}
func (*StreamAbort) msg()    {}

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed pgoutput message")

// Decoder turns pgoutput payloads (the WALData of XLogData) into Messages,
// tracking relations by id. Not safe for concurrent use.
type Decoder struct {
	rels     map[uint32]*Relation
	inStream bool
}

// NewDecoder returns a decoder that knows no relations yet.
func NewDecoder() *Decoder { return &Decoder{rels: map[uint32]*Relation{}} }

// Relation returns the last Relation message seen for id.
func (d *Decoder) Relation(id uint32) (*Relation, bool) {
	r, ok := d.rels[id]
	return r, ok
}

// reader is a bounds-checked cursor over one message.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s at offset %d of %d", ErrMalformed, what, r.off, len(r.b))
	}
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b)-r.off < n {
		r.fail("truncated " + what)
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) u8(what string) byte {
	if s := r.take(1, what); s != nil {
		return s[0]
	}
	return 0
}

func (r *reader) u16(what string) uint16 {
	if s := r.take(2, what); s != nil {
		return binary.BigEndian.Uint16(s)
	}
	return 0
}

func (r *reader) u32(what string) uint32 {
	if s := r.take(4, what); s != nil {
		return binary.BigEndian.Uint32(s)
	}
	return 0
}

func (r *reader) u64(what string) uint64 {
	if s := r.take(8, what); s != nil {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}

func (r *reader) lsn(what string) pglogrepl.LSN { return pglogrepl.LSN(r.u64(what)) }

// pgEpochMicros is PostgreSQL's timestamp epoch (2000-01-01) in Unix
// microseconds; timestamps on the wire are microseconds since.
const pgEpochMicros = 946684800 * 1000000

func (r *reader) time(what string) time.Time {
	us := int64(r.u64(what))
	if r.err != nil {
		return time.Time{}
	}
	return time.UnixMicro(pgEpochMicros + us).UTC()
}

func (r *reader) cstring(what string) string {
	if r.err != nil {
		return ""
	}
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.fail("unterminated " + what)
	return ""
}

func (r *reader) done(what string) {
	if r.err == nil && r.off != len(r.b) {
		r.fail(fmt.Sprintf("%d trailing bytes after %s", len(r.b)-r.off, what))
	}
}

// Decode decodes one pgoutput message. Tuple data is copied, so data may be
// reused by the caller afterwards. Protocol version 2's streamed-transaction
// framing is understood (an in-stream message carries its xid).
func (d *Decoder) Decode(data []byte) (Message, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty message", ErrMalformed)
	}
	r := &reader{b: data, off: 1}
	var m Message
	switch data[0] {
	case 'B':
		b := &Begin{FinalLSN: r.lsn("begin final lsn"), CommitTime: r.time("begin commit time"), Xid: r.u32("begin xid")}
		r.done("begin")
		m = b
	case 'C':
		c := &Commit{Flags: r.u8("commit flags"), CommitLSN: r.lsn("commit lsn"), EndLSN: r.lsn("commit end lsn"), CommitTime: r.time("commit time")}
		r.done("commit")
		m = c
	case 'O':
		o := &Origin{CommitLSN: r.lsn("origin lsn"), Name: r.cstring("origin name")}
		r.done("origin")
		m = o
	case 'R':
		rel := &Relation{}
		d.xid(r)
		rel.ID = r.u32("relation id")
		rel.Namespace = r.cstring("relation namespace")
		rel.Name = r.cstring("relation name")
		rel.ReplicaIdentity = r.u8("relation replica identity")
		n := int(r.u16("relation column count"))
		if r.err == nil && n > (len(r.b)-r.off)/10 { // each column takes at least 10 bytes
			r.fail("relation column count too large")
		}
		if r.err == nil {
			rel.Columns = make([]RelationColumn, n)
		}
		for i := 0; i < n && r.err == nil; i++ {
			flags := r.u8("column flags")
			rel.Columns[i] = RelationColumn{Key: flags&1 == 1, Name: r.cstring("column name"), TypeOID: r.u32("column type"), TypeMod: int32(r.u32("column typmod"))}
		}
		r.done("relation")
		if r.err == nil {
			d.rels[rel.ID] = rel
		}
		m = rel
	case 'Y':
		t := &TypeInfo{}
		d.xid(r)
		t.OID = r.u32("type oid")
		t.Namespace = r.cstring("type namespace")
		t.Name = r.cstring("type name")
		r.done("type")
		m = t
	case 'I', 'U', 'D':
		m = d.change(r, ChangeKind(data[0]))
	case 'T':
		t := &Truncate{}
		t.Xid = d.xid(r)
		n := int(r.u32("truncate relation count"))
		t.Options = r.u8("truncate options")
		if r.err == nil && n > (len(r.b)-r.off)/4 {
			r.fail("truncate relation count too large")
		}
		for i := 0; i < n && r.err == nil; i++ {
			id := r.u32("truncate relation id")
			rel, ok := d.rels[id]
			if !ok && r.err == nil {
				r.err = fmt.Errorf("%w: truncate of relation %d before its Relation message", ErrMalformed, id)
			}
			t.Rels = append(t.Rels, rel)
		}
		r.done("truncate")
		m = t
	case 'M':
		lm := &LogicalMessage{}
		lm.Xid = d.xid(r)
		lm.Transactional = r.u8("message flags") == 1
		lm.LSN = r.lsn("message lsn")
		lm.Prefix = r.cstring("message prefix")
		n := r.u32("message length")
		if c := r.take(int(n), "message content"); c != nil {
			lm.Content = append([]byte(nil), c...)
		}
		r.done("message")
		m = lm
	case 'S':
		s := &StreamStart{Xid: r.u32("stream start xid"), FirstSegment: r.u8("stream start first segment") == 1}
		r.done("stream start")
		if r.err == nil {
			d.inStream = true
		}
		m = s
	case 'E':
		r.done("stream stop")
		if r.err == nil {
			d.inStream = false
		}
		m = &StreamStop{}
	case 'c':
		s := &StreamCommit{Xid: r.u32("stream commit xid"), Flags: r.u8("stream commit flags"), CommitLSN: r.lsn("stream commit lsn"), EndLSN: r.lsn("stream commit end lsn"), CommitTime: r.time("stream commit time")}
		r.done("stream commit")
		m = s
	case 'A':
		s := &StreamAbort{Xid: r.u32("stream abort xid"), SubXid: r.u32("stream abort subxid")}
		// PG16+ with parallel streaming appends the abort LSN and time.
		if len(r.b)-r.off == 16 {
			r.take(16, "stream abort lsn and time")
		}
		r.done("stream abort")
		m = s
	default:
		return nil, fmt.Errorf("%w: unknown message type %q", ErrMalformed, data[0])
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// xid reads the transaction id that prefixes data messages inside a streamed
// transaction.
func (d *Decoder) xid(r *reader) uint32 {
	if d.inStream {
		return r.u32("in-stream xid")
	}
	return 0
}

func (d *Decoder) change(r *reader, kind ChangeKind) Message {
	// One copy per change; the tuples' Data slices point into it.
	r.b = append([]byte(nil), r.b...)
	c := &Change{Kind: kind}
	c.Xid = d.xid(r)
	id := r.u32("relation id")
	if r.err != nil {
		return nil
	}
	rel, ok := d.rels[id]
	if !ok {
		r.err = fmt.Errorf("%w: %s of relation %d before its Relation message", ErrMalformed, kind, id)
		return nil
	}
	c.Rel = rel
	tag := r.u8("tuple tag")
	switch kind {
	case Insert:
		if tag != 'N' && r.err == nil {
			r.fail(fmt.Sprintf("insert tuple tag %q, want 'N'", tag))
		}
		c.New = d.tuple(r, rel)
	case Update:
		if tag == 'K' || tag == 'O' {
			c.OldKind = tag
			c.Old = d.tuple(r, rel)
			tag = r.u8("update new tuple tag")
		}
		if tag != 'N' && r.err == nil {
			r.fail(fmt.Sprintf("update tuple tag %q, want 'N'", tag))
		}
		c.New = d.tuple(r, rel)
	case Delete:
		if tag != 'K' && tag != 'O' && r.err == nil {
			r.fail(fmt.Sprintf("delete tuple tag %q, want 'K' or 'O'", tag))
		}
		c.OldKind = tag
		c.Old = d.tuple(r, rel)
	}
	r.done(kind.String())
	return c
}

func (d *Decoder) tuple(r *reader, rel *Relation) Tuple {
	n := int(r.u16("tuple column count"))
	if r.err != nil {
		return nil
	}
	if n != len(rel.Columns) {
		r.err = fmt.Errorf("%w: tuple of %s has %d columns, its Relation message %d", ErrMalformed, rel, n, len(rel.Columns))
		return nil
	}
	t := make(Tuple, n)
	for i := 0; i < n && r.err == nil; i++ {
		k := r.u8("column kind")
		switch k {
		case ColNull, ColUnchanged:
			t[i] = Col{Kind: k}
		case ColText, ColBinary:
			l := r.u32("column length")
			t[i] = Col{Kind: k, Data: r.take(int(l), "column value")}
		default:
			if r.err == nil {
				r.fail(fmt.Sprintf("column kind %q", k))
			}
		}
	}
	return t
}
