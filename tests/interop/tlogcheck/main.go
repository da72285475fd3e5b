// Command tlogcheck checks Keelgate's signed checkpoints and Merkle proofs with Go's
// reference code, golang.org/x/mod/sumdb/note and golang.org/x/mod/sumdb/tlog: what the Go
// checksum database and every go command run. keelgate.audit claims its notes and proofs
// are theirs; this is the other side of that claim, so a checkpoint or proof Go refuses is
// a bug in keelgate.audit whatever Keelgate's own checks say. tests/interop/go_reference.py
// builds it (GOPATH=/usr/share/gocode GO111MODULE=off, Debian's golang-golang-x-mod-dev)
// and feeds it documents the engine or the running product made.
//
// Input, one JSON document on stdin:
//
//	{"key": "<name>+<key id>+<base64>", "note": "<signed checkpoint>",
//	 "inclusion": [{"index": 3, "leaf_hash": "<base64>", "hashes": ["<base64>", ...],
//	                "leaf": "<base64>"}],
//	 "consistency": [{"old_size": 2, "old_root": "<base64>", "hashes": ["<base64>", ...]}],
//	 "witness_keys": ["<name>+<key id>+<base64 of 0x04 || key>"]}
//
// The proofs are checked against the checkpoint's size and root; an inclusion's "leaf", the
// leaf's bytes, is optional: given, its tlog.RecordHash must be "leaf_hash". "witness_keys", optional,
// are C2SP tlog-cosignature (cosignature/v1) keys: note.Open is given a verifier for each beside
// the log's, and each must have cosigned the note. Output: one line per check passed; at the first
// failure, its reason on stderr and exit status 1.
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type document struct {
	Key         string        `json:"key"`
	Note        string        `json:"note"`
	Inclusion   []inclusion   `json:"inclusion"`
	Consistency []consistency `json:"consistency"`
	WitnessKeys []string      `json:"witness_keys"`
}

type inclusion struct {
	Index    int64    `json:"index"`
	LeafHash string   `json:"leaf_hash"`
	Hashes   []string `json:"hashes"`
	Leaf     *[]byte  `json:"leaf"` // encoding/json reads base64 into a []byte
}

type consistency struct {
	OldSize int64    `json:"old_size"`
	OldRoot string   `json:"old_root"`
	Hashes  []string `json:"hashes"`
}

// cosigner verifies C2SP cosignature/v1 lines: sumdb/note knows only Ed25519 note keys (type
// 0x01), so a witness's key (type 0x04) is a note.Verifier of its own, as C2SP's tlog-cosignature
// describes: the signature is a u64 big-endian time, then Ed25519 over "cosignature/v1\n",
// "time <T>\n" and the note's text.
type cosigner struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

func (c cosigner) Name() string    { return c.name }
func (c cosigner) KeyHash() uint32 { return c.hash }
func (c cosigner) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig[:8])
	if t >= 1<<63 {
		return false
	}
	message := append([]byte(fmt.Sprintf("cosignature/v1\ntime %d\n", t)), msg...)
	return ed25519.Verify(c.key, message, sig[8:])
}

func newCosigner(vkey string) cosigner {
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		fail("witness key %q is not name+keyid+base64", vkey)
	}
	id, err1 := hex.DecodeString(parts[1])
	raw, err2 := base64.StdEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || len(id) != 4 || len(raw) != 33 || raw[0] != 0x04 {
		fail("witness key %q is not a cosignature/v1 Ed25519 key", vkey)
	}
	sum := sha256.Sum256(append([]byte(parts[0]+"\n"), raw...))
	if !bytes.Equal(sum[:4], id) {
		fail("witness key %q: its id is not its name's and key's", vkey)
	}
	return cosigner{parts[0], binary.BigEndian.Uint32(id), ed25519.PublicKey(raw[1:])}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL "+format+"\n", args...)
	os.Exit(1)
}

func hash(b64 string) tlog.Hash {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != tlog.HashSize {
		fail("%q is not a base64 SHA-256 hash", b64)
	}
	var h tlog.Hash
	copy(h[:], raw)
	return h
}

func hashes(list []string) []tlog.Hash {
	out := make([]tlog.Hash, len(list))
	for i, b64 := range list {
		out[i] = hash(b64)
	}
	return out
}

// checkpoint reads a C2SP tlog-checkpoint body. tlog.ParseTree accepts only the checksum
// database's own origin line, so the three lines are read here, by ParseTree's rules for
// the size and the root; extension lines after them are ignored, as ParseTree ignores them.
func checkpoint(text string) (origin string, size int64, root tlog.Hash) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 || lines[0] == "" {
		fail("checkpoint has no origin, size and root: %q", text)
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || lines[1] != strconv.FormatInt(size, 10) {
		fail("checkpoint size %q is not a decimal number", lines[1])
	}
	return lines[0], size, hash(lines[2])
}

func main() {
	var doc document
	decoder := json.NewDecoder(os.Stdin)
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&doc); err != nil {
		fail("input: %v", err)
	}
	verifier, err := note.NewVerifier(doc.Key)
	if err != nil {
		fail("verifier key %q: %v", doc.Key, err)
	}
	verifiers := []note.Verifier{verifier}
	for _, vkey := range doc.WitnessKeys {
		verifiers = append(verifiers, newCosigner(vkey))
	}
	opened, err := note.Open([]byte(doc.Note), note.VerifierList(verifiers...))
	if err != nil {
		fail("note: %v", err)
	}
	origin, size, root := checkpoint(opened.Text)
	signedBy := map[string]bool{}
	for _, sig := range opened.Sigs {
		signedBy[fmt.Sprintf("%s/%08x", sig.Name, sig.Hash)] = true
	}
	for _, v := range verifiers {
		if !signedBy[fmt.Sprintf("%s/%08x", v.Name(), v.KeyHash())] {
			fail("note: no signature by %s", v.Name())
		}
	}
	fmt.Printf("ok note: %s, size %d, signed by %s\n", origin, size, verifier.Name())
	for _, v := range verifiers[1:] {
		fmt.Printf("ok cosignature by %s\n", v.Name())
	}
	for _, p := range doc.Inclusion {
		if p.Leaf != nil && tlog.RecordHash(*p.Leaf) != hash(p.LeafHash) {
			fail("leaf %d: its hash is not SHA-256(0x00 || leaf)", p.Index)
		}
		if err := tlog.CheckRecord(hashes(p.Hashes), size, root, p.Index, hash(p.LeafHash)); err != nil {
			fail("inclusion of leaf %d in %d: %v", p.Index, size, err)
		}
		fmt.Printf("ok inclusion of leaf %d in %d\n", p.Index, size)
	}
	for _, p := range doc.Consistency {
		if err := tlog.CheckTree(hashes(p.Hashes), size, root, p.OldSize, hash(p.OldRoot)); err != nil {
			fail("consistency of %d with %d: %v", p.OldSize, size, err)
		}
		fmt.Printf("ok consistency of %d with %d\n", p.OldSize, size)
	}
}
