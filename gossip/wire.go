package gossip

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/prefixring/prefixring/gossip/core"
	"github.com/prefixring/prefixring/internal/wire"
)

// Wire format, version 4. Every message starts with the version byte and a
// kind byte; integers are varints, strings length-prefixed.
//
//	delta:    an entry without its endpoint list (core.AppendDelta)
//	full:     an entry (core.AppendEntry)
//	envelope: from (the sender's name), s, then s sections, each: tag
//	          (1 byte), length, body. Tags increase, each at most once.
//	  tag 0:  entries: m, then m entries (core.AppendEntries)
//	  tag t:  the body of the payload carried under tag t ([Payload])
//
// Deltas and full entries are the per-interval publications (UDP, so they
// stay small: a delta of 500 endpoints fits one packet); the envelope
// carries everything else: push/pull (our entries and every payload's
// state), a member that joins (our entry and every payload's own part), a
// payload's broadcast, and a payload's reply. A section whose tag this
// build carries no payload for is skipped, and so is one its payload
// cannot decode: each is counted, never the whole message. A message of
// another version or an unknown kind is refused, counted and logged (at
// most once a minute a reason). Version 4 had no KV shared parts (a
// group's shared part was summed over the replicas that held it); version 3 had no KV counts (K) and no
// evidence bits in an entry; version 2 had three push/pull kinds and one
// kind per payload; version 1 had no listed bits.
const (
	wireVersion = 5

	kindDelta    byte = 1
	kindFull     byte = 2
	kindEnvelope byte = 3

	tagEntries byte = 0
	maxSection      = 64 // sections in one envelope
)

var (
	errMalformed   = errors.New("gossip: malformed message")
	errVersion     = errors.New("gossip: unknown wire version")
	errUnknownKind = errors.New("gossip: unknown message kind")
)

// encodeDelta encodes e as a delta message.
func encodeDelta(e core.Entry) []byte {
	return core.AppendDelta([]byte{wireVersion, kindDelta}, e)
}

// encodeFull encodes e with its endpoint list.
func encodeFull(e core.Entry) []byte { return core.AppendEntry([]byte{wireVersion, kindFull}, e) }

// section is one tagged part of an envelope.
type section struct {
	tag  byte
	body []byte
}

// encodeEnvelope encodes sections (tags increasing) from node from.
// Entries, if any, go first under tag 0.
func encodeEnvelope(from string, entries []core.Entry, sections ...section) []byte {
	b := wire.AppendString([]byte{wireVersion, kindEnvelope}, from)
	n := len(sections)
	if entries != nil {
		n++
	}
	b = binary.AppendUvarint(b, uint64(n))
	if entries != nil {
		b = append(b, tagEntries)
		b = wire.AppendBytes(b, core.AppendEntries(nil, entries))
	}
	for _, s := range sections {
		b = append(b, s.tag)
		b = wire.AppendBytes(b, s.body)
	}
	return b
}

// message is a decoded message. A delta has digest set and its entry's
// Endpoints nil until expanded with [message.expand]. An envelope's
// entries section is decoded (badEntries: it did not decode, and entries
// is empty); its other sections are left to their payloads.
type message struct {
	kind       byte
	from       string
	entries    []core.Entry
	digest     uint64
	sections   []section
	badEntries bool
}

// decode parses a message. It never panics on bad input. An error wraps
// errVersion, errUnknownKind or errMalformed.
func decode(b []byte) (message, error) {
	if len(b) < 2 {
		return message{}, errMalformed
	}
	if b[0] != wireVersion {
		return message{}, fmt.Errorf("%w %d (this build speaks %d)", errVersion, b[0], wireVersion)
	}
	m := message{kind: b[1]}
	switch m.kind {
	case kindDelta:
		d, err := core.DecodeDelta(b[2:])
		if err != nil {
			return message{}, errMalformed
		}
		m.entries, m.digest = []core.Entry{d.Entry}, d.Digest
	case kindFull:
		e, err := core.DecodeEntry(b[2:])
		if err != nil {
			return message{}, errMalformed
		}
		m.entries = []core.Entry{e}
	case kindEnvelope:
		if err := m.readEnvelope(b[2:]); err != nil {
			return message{}, err
		}
	default:
		return message{}, fmt.Errorf("%w %d", errUnknownKind, m.kind)
	}
	return m, nil
}

// readEnvelope reads an envelope's sender and sections, and decodes its
// entries section.
func (m *message) readEnvelope(b []byte) error {
	r := wire.NewReader(b)
	m.from = r.String()
	n := r.Count(maxSection)
	for i := 0; i < n && r.Err() == nil; i++ {
		s := section{tag: r.Byte(), body: r.LenBytes()}
		if r.Err() == nil && i > 0 && s.tag <= m.sections[len(m.sections)-1].tag {
			r.Fail(errMalformed) // tags increase, each at most once
		}
		m.sections = append(m.sections, s)
	}
	if r.Done() != nil {
		return errMalformed
	}
	if len(m.sections) > 0 && m.sections[0].tag == tagEntries {
		entries, err := core.DecodeEntries(m.sections[0].body)
		m.entries, m.badEntries = entries, err != nil
		if err != nil {
			m.entries = nil
		}
		m.sections = m.sections[1:]
	}
	return nil
}

// expand fills a delta's endpoint list from t. It reports false when t
// holds no list with the delta's digest, or the list's length differs.
func (m *message) expand(t *core.EntryTable) bool {
	if m.kind != kindDelta {
		return true
	}
	d := core.Delta{Entry: m.entries[0], Digest: m.digest}
	if !d.Expand(t) {
		return false
	}
	m.entries[0] = d.Entry
	return true
}
