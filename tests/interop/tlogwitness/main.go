// Command tlogwitness is a C2SP tlog-witness for Keelgate's tests, built on Go's reference
// code: it opens each submitted checkpoint with golang.org/x/mod/sumdb/note, checks the
// consistency proof with golang.org/x/mod/sumdb/tlog's CheckTree against the tree it last
// cosigned, and cosigns with C2SP tlog-cosignature (cosignature/v1, crypto/ed25519). What it
// accepts and answers is the spec as Go's libraries read it, so Keelgate's witness client
// (audit/witnesses.py) is judged by code it shares nothing with. tests/interop/go_reference.py
// builds it as it builds tlogcheck (GOPATH=/usr/share/gocode GO111MODULE=off).
//
//	tlogwitness -name witness.test/w1 -seed <base64 32 bytes> -log <log vkey> [-log ...]
//	            [-state FILE] [-listen 127.0.0.1:0] [-forge]
//
// It prints "vkey <its cosignature/v1 vkey>" and "url http://<address>" on stdout, then
// serves POST /add-checkpoint until killed. Its state (per origin, the size and root it
// last cosigned) is kept in -state, written before each answer, so a restart keeps it.
// -forge makes every cosignature's signature wrong (a witness Keelgate must not believe).
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type logKeys []string

func (l *logKeys) String() string     { return strings.Join(*l, ",") }
func (l *logKeys) Set(v string) error { *l = append(*l, v); return nil }

type tree struct {
	Size int64  `json:"size"`
	Root []byte `json:"root"`
}

type witness struct {
	name     string
	key      ed25519.PrivateKey
	keyID    [4]byte
	logs     map[string]note.Verifier // by origin: a log's key is named for its origin
	forge    bool
	path     string
	mu       sync.Mutex // checking the old size and storing the new one are one step (C2SP)
	cosigned map[string]tree
}

func (w *witness) vkey() string {
	public := w.key.Public().(ed25519.PublicKey)
	return fmt.Sprintf("%s+%s+%s", w.name, hex.EncodeToString(w.keyID[:]),
		base64.StdEncoding.EncodeToString(append([]byte{0x04}, public...)))
}

func (w *witness) save() error {
	if w.path == "" {
		return nil
	}
	data, err := json.Marshal(w.cosigned)
	if err != nil {
		return err
	}
	if err := os.WriteFile(w.path+".tmp", data, 0o600); err != nil {
		return err
	}
	return os.Rename(w.path+".tmp", w.path)
}

func (w *witness) cosign(text string) string {
	now := uint64(time.Now().Unix())
	message := fmt.Sprintf("cosignature/v1\ntime %d\n%s", now, text)
	signature := ed25519.Sign(w.key, []byte(message))
	if w.forge {
		signature[0] ^= 1
	}
	raw := make([]byte, 0, 4+8+ed25519.SignatureSize)
	raw = append(raw, w.keyID[:]...)
	raw = binary.BigEndian.AppendUint64(raw, now)
	raw = append(raw, signature...)
	return fmt.Sprintf("\u2014 %s %s\n", w.name, base64.StdEncoding.EncodeToString(raw))
}

// request reads an add-checkpoint body: "old <size>", up to 63 base64 hashes, a blank
// line, the signed checkpoint.
func request(body []byte) (old int64, proof tlog.TreeProof, signed []byte, err error) {
	split := bytes.Index(body, []byte("\n\n"))
	if split < 0 {
		return 0, nil, nil, fmt.Errorf("no blank line after the proof")
	}
	lines := strings.Split(string(body[:split]), "\n")
	if !strings.HasPrefix(lines[0], "old ") {
		return 0, nil, nil, fmt.Errorf("no old size line")
	}
	digits := strings.TrimPrefix(lines[0], "old ")
	old, err = strconv.ParseInt(digits, 10, 64)
	if err != nil || old < 0 || digits != strconv.FormatInt(old, 10) {
		return 0, nil, nil, fmt.Errorf("old size %q is not a decimal number", digits)
	}
	if len(lines)-1 > 63 {
		return 0, nil, nil, fmt.Errorf("more than 63 proof lines")
	}
	for _, line := range lines[1:] {
		raw, err := base64.StdEncoding.DecodeString(line)
		if err != nil || len(raw) != tlog.HashSize {
			return 0, nil, nil, fmt.Errorf("proof line %q is not a base64 hash", line)
		}
		var h tlog.Hash
		copy(h[:], raw)
		proof = append(proof, h)
	}
	return old, proof, body[split+2:], nil
}

func checkpoint(text string) (origin string, size int64, root tlog.Hash, err error) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 || lines[0] == "" {
		return "", 0, root, fmt.Errorf("not a checkpoint")
	}
	size, err = strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || lines[1] != strconv.FormatInt(size, 10) {
		return "", 0, root, fmt.Errorf("size %q is not a decimal number", lines[1])
	}
	raw, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(raw) != tlog.HashSize {
		return "", 0, root, fmt.Errorf("root %q is not a base64 hash", lines[2])
	}
	copy(root[:], raw)
	return lines[0], size, root, nil
}

func (w *witness) addCheckpoint(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(rw, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	old, proof, signed, err := request(body)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	origin, _, _ := strings.Cut(string(signed), "\n")
	verifier, known := w.logs[origin]
	if !known {
		http.Error(rw, "unknown log origin", http.StatusNotFound)
		return
	}
	opened, err := note.Open(signed, note.VerifierList(verifier))
	if err != nil {
		http.Error(rw, "note: "+err.Error(), http.StatusForbidden)
		return
	}
	_, size, root, err := checkpoint(opened.Text)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	if old > size {
		http.Error(rw, "old size past the checkpoint's", http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	last := w.cosigned[origin]
	conflict := func() {
		rw.Header().Set("Content-Type", "text/x.tlog.size")
		rw.WriteHeader(http.StatusConflict)
		fmt.Fprintf(rw, "%d\n", last.Size)
	}
	if old != last.Size {
		conflict()
		return
	}
	switch {
	case old == 0:
		if len(proof) != 0 {
			http.Error(rw, "a proof from size 0", http.StatusUnprocessableEntity)
			return
		}
	case old == size:
		if !bytes.Equal(last.Root, root[:]) || len(proof) != 0 {
			conflict()
			return
		}
	default:
		var lastRoot tlog.Hash
		copy(lastRoot[:], last.Root)
		if err := tlog.CheckTree(proof, size, root, old, lastRoot); err != nil {
			log.Printf("%s: consistency from %d to %d: %v", origin, old, size, err)
			http.Error(rw, "consistency proof: "+err.Error(), http.StatusUnprocessableEntity)
			return
		}
	}
	w.cosigned[origin] = tree{size, root[:]}
	if err := w.save(); err != nil {
		w.cosigned[origin] = last
		http.Error(rw, "state: "+err.Error(), http.StatusInternalServerError)
		return
	}
	log.Printf("%s: cosigned size %d (from %d)", origin, size, old)
	io.WriteString(rw, w.cosign(opened.Text))
}

func main() {
	var logs logKeys
	name := flag.String("name", "witness.test/w1", "the witness's key name")
	seed := flag.String("seed", "", "the witness's Ed25519 seed, 32 bytes, base64")
	state := flag.String("state", "", "a file keeping the trees cosigned, read at start")
	listen := flag.String("listen", "127.0.0.1:0", "the address to serve on")
	forge := flag.Bool("forge", false, "make every cosignature's signature wrong")
	flag.Var(&logs, "log", "a log's verifier key (name+keyid+base64), its name the log's origin; repeatable")
	flag.Parse()
	raw, err := base64.StdEncoding.DecodeString(*seed)
	if err != nil || len(raw) != ed25519.SeedSize {
		log.Fatalf("-seed is not 32 bytes of base64")
	}
	w := &witness{name: *name, key: ed25519.NewKeyFromSeed(raw), logs: map[string]note.Verifier{},
		forge: *forge, path: *state, cosigned: map[string]tree{}}
	id := sha256.Sum256(append([]byte(*name+"\n\x04"), w.key.Public().(ed25519.PublicKey)...))
	copy(w.keyID[:], id[:4])
	for _, vkey := range logs {
		verifier, err := note.NewVerifier(vkey)
		if err != nil {
			log.Fatalf("-log %q: %v", vkey, err)
		}
		w.logs[verifier.Name()] = verifier
	}
	if *state != "" {
		if data, err := os.ReadFile(*state); err == nil {
			if err := json.Unmarshal(data, &w.cosigned); err != nil {
				log.Fatalf("-state %s: %v", *state, err)
			}
		} else if !os.IsNotExist(err) {
			log.Fatalf("-state %s: %v", *state, err)
		}
	}
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	fmt.Printf("vkey %s\nurl http://%s\n", w.vkey(), listener.Addr())
	os.Stdout.Sync()
	mux := http.NewServeMux()
	mux.HandleFunc("/add-checkpoint", w.addCheckpoint)
	log.Fatal(http.Serve(listener, mux))
}
