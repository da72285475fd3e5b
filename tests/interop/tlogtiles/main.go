// Command tlogtiles reads a Keelgate tenant's log over HTTP as C2SP tlog-tiles and checks it
// with Go's reference code, golang.org/x/mod/sumdb/note and golang.org/x/mod/sumdb/tlog: the
// checkpoint at <prefix>/checkpoint opened with the published key, the root recomputed from
// tiles read through tlog.TileHashReader (which checks them against the signed root; see
// prove for a tile it may let through), the entry bundles, each record hashed (tlog.RecordHash) and its inclusion proven from tiles
// (tlog.ProveRecord) and checked against the root (tlog.CheckRecord), and a consistency proof
// from an older checkpoint (tlog.ProveTree, tlog.CheckTree).
// tests/interop/go_reference.py builds it as it builds tlogcheck.
//
// Usage:
//
//	KEELGATE_AUTHORIZATION="Bearer kg_..." tlogtiles -prefix URL -vkey KEY \
//	    [-records 0,5,300] [-entries-from 0] [-old SIZE:ROOT_BASE64]
//
// -records: the leaves to prove; -entries-from: the first leaf whose bundle is read (every
// bundle from that one to the checkpoint's size is; -1 reads none); -old: a checkpoint kept
// earlier. Output, one line per check passed: "ok note ...", "ok tree ...", "ok record <index>
// <base64 of its data>", "ok bundle <path> <count>", "ok consistency ..."; at the first
// failure, "FAIL <what>: <Go's error>" on stderr and exit status 1.
package main

import (
	"encoding/base64"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const height = 8 // C2SP tlog-tiles fixes the tile height

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL "+format+"\n", args...)
	os.Exit(1)
}

var (
	prefix = flag.String("prefix", "", "the log's URL prefix (no trailing slash)")
	vkey   = flag.String("vkey", "", "the log's verifier key, name+id+base64")
	recs   = flag.String("records", "", "comma-separated leaf indexes to prove")
	from   = flag.Int64("entries-from", 0, "the first leaf whose entry bundle is read; -1: none")
	old    = flag.String("old", "", "an older checkpoint's SIZE:ROOT (base64) to prove consistency with")
)

// get fetches <prefix>/<path>; only a 200 is data.
func get(path string) ([]byte, error) {
	req, err := http.NewRequest("GET", *prefix+"/"+path, nil)
	if err != nil {
		return nil, err
	}
	if auth := os.Getenv("KEELGATE_AUTHORIZATION"); auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req) // asks for gzip and undoes it, as every Go client
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return body, nil
}

// c2spPath is t's path as C2SP tlog-tiles spells it: Go's tile/H/L/N[.p/W] without the
// height (fixed at 8), and "entries" for Go's data level.
func c2spPath(t tlog.Tile) string {
	p := strings.TrimPrefix(t.Path(), fmt.Sprintf("tile/%d/", height))
	return "tile/" + strings.Replace(p, "data/", "entries/", 1)
}

// tiles is a tlog.TileReader over HTTP; TileHashReader checks what it returns. A tile is
// fetched once a run (the server's tiles never change).
type tiles map[string][]byte

func (tiles) Height() int { return height }

func (c tiles) ReadTiles(list []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(list))
	for i, t := range list {
		path := c2spPath(t)
		if c[path] == nil {
			data, err := get(path)
			if err != nil {
				return nil, err
			}
			c[path] = data
		}
		out[i] = c[path]
	}
	return out, nil
}

func (tiles) SaveTiles([]tlog.Tile, [][]byte) {}

// checkpoint reads a C2SP tlog-checkpoint body (tlog.ParseTree accepts only the checksum
// database's origin), by ParseTree's rules for the size and the root.
func checkpoint(text string) (origin string, tree tlog.Tree) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 || lines[0] == "" {
		fail("checkpoint has no origin, size and root: %q", text)
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || lines[1] != strconv.FormatInt(size, 10) {
		fail("checkpoint size %q is not a decimal number", lines[1])
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		fail("checkpoint root %q: %v", lines[2], err)
	}
	return lines[0], tlog.Tree{N: size, Hash: root}
}

// bundle splits an entry bundle into its records: big-endian uint16 lengths, each then its data.
func bundle(data []byte) ([][]byte, error) {
	var records [][]byte
	for len(data) > 0 {
		if len(data) < 2 {
			return nil, fmt.Errorf("a length cut short")
		}
		n := int(binary.BigEndian.Uint16(data))
		if len(data) < 2+n {
			return nil, fmt.Errorf("a record of %d bytes cut short", n)
		}
		records = append(records, data[2:2+n])
		data = data[2+n:]
	}
	return records, nil
}

// prove proves the record at index is in the tree from tiles, and checks the proof against
// the signed root. Each record is proven rather than compared with the leaf hashes ReadHashes
// returns: ReadHashes checks the tiles it fetched for a hash against their parents from the
// position len(stx) on, the number of the root's subtrees rather than of their distinct tiles,
// so a tile can come back unchecked (x/mod as Debian ships it); CheckRecord checks the root.
func prove(index int64, record []byte, tree tlog.Tree, hr tlog.HashReader) {
	proof, err := tlog.ProveRecord(tree.N, index, hr)
	if err != nil {
		fail("proof of record %d: %v", index, err)
	}
	if err := tlog.CheckRecord(proof, tree.N, tree.Hash, index, tlog.RecordHash(record)); err != nil {
		fail("inclusion of record %d in %d: %v", index, tree.N, err)
	}
}

// readBundle fetches the entry bundle holding leaf index of the tree, as wide as the tree
// makes it, and proves each of its records in the tree.
func readBundle(index int64, tree tlog.Tree, hr tlog.HashReader) (tlog.Tile, [][]byte) {
	t := tlog.Tile{H: height, L: -1, N: index >> height, W: 1 << height}
	if rest := tree.N - t.N<<height; rest < int64(t.W) {
		t.W = int(rest)
	}
	data, err := get(c2spPath(t))
	if err != nil {
		fail("bundle %s: %v", c2spPath(t), err)
	}
	records, err := bundle(data)
	if err != nil {
		fail("bundle %s: %v", c2spPath(t), err)
	}
	if len(records) != t.W {
		fail("bundle %s: %d records, not %d", c2spPath(t), len(records), t.W)
	}
	for i, record := range records {
		prove(t.N<<height+int64(i), record, tree, hr)
	}
	return t, records
}

func main() {
	flag.Parse()
	verifier, err := note.NewVerifier(*vkey)
	if err != nil {
		fail("verifier key %q: %v", *vkey, err)
	}
	raw, err := get("checkpoint")
	if err != nil {
		fail("checkpoint: %v", err)
	}
	opened, err := note.Open(raw, note.VerifierList(verifier))
	if err != nil {
		fail("note: %v", err)
	}
	origin, tree := checkpoint(opened.Text)
	fmt.Printf("ok note: %s, size %d, signed by %s\n", origin, tree.N, verifier.Name())

	hr := tlog.TileHashReader(tree, tiles{})
	root, err := tlog.TreeHash(tree.N, hr)
	if err != nil {
		fail("tree: %v", err)
	}
	if root != tree.Hash {
		fail("tree: the tiles' root %v is not the checkpoint's %v", root, tree.Hash)
	}
	fmt.Printf("ok tree of %d from tiles\n", tree.N)

	if *recs != "" {
		for _, field := range strings.Split(*recs, ",") {
			index, err := strconv.ParseInt(field, 10, 64)
			if err != nil {
				fail("record %q: %v", field, err)
			}
			t, records := readBundle(index, tree, hr)
			record := records[index-t.N<<height]
			prove(index, record, tree, hr)
			fmt.Printf("ok record %d %s\n", index, base64.StdEncoding.EncodeToString(record))
		}
	}

	if *from >= 0 {
		for index := *from >> height << height; index < tree.N; index += 1 << height {
			t, records := readBundle(index, tree, hr)
			fmt.Printf("ok bundle %s %d\n", c2spPath(t), len(records))
		}
	}

	if *old != "" {
		sizeText, rootText, _ := strings.Cut(*old, ":")
		size, err := strconv.ParseInt(sizeText, 10, 64)
		if err != nil {
			fail("old checkpoint %q: %v", *old, err)
		}
		oldRoot, err := tlog.ParseHash(rootText)
		if err != nil {
			fail("old checkpoint %q: %v", *old, err)
		}
		proof, err := tlog.ProveTree(tree.N, size, hr)
		if err != nil {
			fail("consistency proof of %d with %d: %v", size, tree.N, err)
		}
		if err := tlog.CheckTree(proof, tree.N, tree.Hash, size, oldRoot); err != nil {
			fail("consistency of %d with %d: %v", size, tree.N, err)
		}
		fmt.Printf("ok consistency of %d with %d\n", size, tree.N)
	}
}
