package workspace

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/mcp-subagent/mcp-subagent/agent"
)

// sniffLen is how much of a file is checked for NUL bytes to call it binary.
const sniffLen = 8000

func isBinary(br *bufio.Reader) bool {
	head, _ := br.Peek(sniffLen)
	return bytes.IndexByte(head, 0) >= 0
}

// ---- read_file ----

func (w *workspace) readFileTool() agent.Tool {
	params := []param{
		{name: "path", kind: kindString, required: true, nonEmpty: true,
			desc: "The file to read, relative to the workspace root (an absolute path is accepted only if it lies inside the workspace)."},
		{name: "offset_line", kind: kindInteger, min: 1,
			desc: "The first line to return, counting from 1. Default 1."},
		{name: "limit_lines", kind: kindInteger, min: 1,
			desc: "The most lines to return. Default: every line from offset_line on, up to the size limit."},
	}
	desc := fmt.Sprintf("Read a text file in the workspace and return its text exactly as stored (no line numbers). "+
		"Paths are relative to the workspace root; nothing outside the workspace can be read, also not through symbolic links. "+
		"At most %s are returned per call: a longer file is cut at a line boundary, with a note at the end giving the offset_line to continue from. "+
		"Use offset_line and limit_lines to read part of a large file. Directories (use list_dir) and binary files are refused.",
		size(w.maxRead))
	return newTool(nameReadFile, desc, params, w.readFile)
}

func (w *workspace) readFile(ctx context.Context, a args) (string, error) {
	arg := a.str("path", "")
	o, err := w.openStat("read", arg)
	if err != nil {
		return "", err
	}
	defer o.close()
	f, fi := o.f, o.fi
	if fi.IsDir() {
		return "", fmt.Errorf("cannot read %q: it is a directory; use list_dir to see its entries", arg)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("cannot read %q: it is not a regular file", arg)
	}
	br := bufio.NewReaderSize(f, 64<<10)
	if isBinary(br) {
		return "", fmt.Errorf("cannot read %q: it looks like a binary file (it contains NUL bytes); read_file returns text only", arg)
	}

	offset := a.integer("offset_line", 1)
	limit := a.integer("limit_lines", 0)
	var out bytes.Buffer
	line := 1    // the line the next chunk belongs to
	shown := 0   // complete lines written to out
	mid := false // part of line has been consumed
	note := ""   // why the output stops early, if it does
	for i := 0; ; i++ {
		if limit > 0 && shown >= limit {
			if _, err := br.Peek(1); err == nil {
				note = fmt.Sprintf("[showing lines %d-%d of %s as asked by limit_lines; the file continues: call read_file with offset_line=%d to read on]",
					offset, line-1, arg, line)
			}
			break
		}
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return "", err
			}
		}
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			complete := chunk[len(chunk)-1] == '\n'
			if line >= offset {
				if out.Len()+len(chunk) > w.maxRead {
					if !mid && out.Len() > 0 {
						note = fmt.Sprintf("[truncated: read_file returns at most %s per call; lines %d-%d shown; call read_file with offset_line=%d to continue]",
							size(w.maxRead), offset, line-1, line)
					} else {
						out.Write(cutUTF8(chunk, w.maxRead-out.Len()))
						note = fmt.Sprintf("[truncated: line %d is longer than the %s read_file returns per call and was cut; call read_file with offset_line=%d to continue after it]",
							line, size(w.maxRead), line+1)
					}
					break
				}
				out.Write(chunk)
			}
			if complete {
				if line >= offset {
					shown++
				}
				line++
			}
			mid = !complete
		}
		if err == io.EOF {
			break
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return "", fsError("read", arg, err)
		}
	}
	if out.Len() == 0 && note == "" {
		if offset == 1 {
			return "(the file is empty)", nil
		}
		total := line - 1
		if mid {
			total = line
		}
		return "", fmt.Errorf("offset_line %d is past the end of %q, which has %d lines", offset, arg, total)
	}
	if note != "" {
		if out.Len() > 0 && out.Bytes()[out.Len()-1] != '\n' {
			out.WriteByte('\n')
		}
		out.WriteString(note)
	}
	return out.String(), nil
}

// ---- list_dir ----

func (w *workspace) listDirTool() agent.Tool {
	params := []param{
		{name: "path", kind: kindString,
			desc: "The directory to list, relative to the workspace root. Default \".\", the root itself."},
	}
	desc := fmt.Sprintf("List the entries of a directory in the workspace, one name per line, sorted by name; "+
		"directories (and symbolic links to directories inside the workspace) end with \"/\". "+
		"It is not recursive: list a subdirectory to look inside it, or use search to find files by content. "+
		"Nothing outside the workspace can be listed. Output is capped at %s.", size(w.maxOutput))
	return newTool(nameListDir, desc, params, w.listDir)
}

func (w *workspace) listDir(ctx context.Context, a args) (string, error) {
	arg := a.str("path", ".")
	o, err := w.openStat("list", arg)
	if err != nil {
		return "", err
	}
	defer o.close()
	f, fi, r, rel := o.f, o.fi, o.root, o.rel
	if !fi.IsDir() {
		return "", fmt.Errorf("cannot list %q: it is a file, not a directory; use read_file to read it", arg)
	}
	entries, err := f.ReadDir(-1)
	if err != nil && len(entries) == 0 {
		return "", fsError("list", arg, err)
	}
	if len(entries) == 0 {
		return "(empty directory)", nil
	}
	slices.SortFunc(entries, func(x, y fs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	var out strings.Builder
	for i, e := range entries {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		name := e.Name()
		if e.IsDir() {
			name += "/"
		} else if e.Type()&fs.ModeSymlink != 0 && w.isDirInside(r, filepath.Join(rel, e.Name())) {
			name += "/"
		}
		if out.Len()+len(name)+1 > w.maxOutput {
			fmt.Fprintf(&out, "[listing truncated at %s: %d of %d entries shown]", size(w.maxOutput), i, len(entries))
			break
		}
		out.WriteString(name)
		out.WriteByte('\n')
	}
	return strings.TrimSuffix(out.String(), "\n"), nil
}

// isDirInside reports whether rel, relative to the real root, leads to a
// directory inside the workspace. A link leading outside does not.
func (w *workspace) isDirInside(r *os.Root, rel string) bool {
	real, _, err := w.resolve(rel)
	if err != nil {
		return false
	}
	st, err := r.Stat(real)
	return err == nil && st.IsDir()
}

// ---- write_file ----

func (w *workspace) writeFileTool() agent.Tool {
	params := []param{
		{name: "path", kind: kindString, required: true, nonEmpty: true,
			desc: "The file to create or overwrite, relative to the workspace root. Missing parent directories are created."},
		{name: "content", kind: kindString, required: true,
			desc: "The complete new content of the file."},
	}
	desc := "Create a file in the workspace, or replace the whole content of an existing one, and create any missing parent directories. " +
		"The content is written to a temporary file that is then renamed into place, so the file is never seen half written; " +
		"an existing file keeps its permissions. Paths are relative to the workspace root; nothing outside the workspace can be written, " +
		"also not through symbolic links. Returns the number of bytes written."
	return newTool(nameWriteFile, desc, params, w.writeFile)
}

func (w *workspace) writeFile(ctx context.Context, a args) (string, error) {
	arg, content := a.str("path", ""), a.str("content", "")
	rel, display, err := w.resolve(arg)
	if err != nil {
		return "", err
	}
	if rel == "." {
		return "", fmt.Errorf("cannot write %q: it is the workspace root directory; name a file inside it", arg)
	}
	if err := gitDirError("write", display, rel); err != nil {
		return "", err
	}
	r, err := w.openRoot()
	if err != nil {
		return "", err
	}
	defer r.Close()
	dir, base := filepath.Split(rel)
	dir = filepath.Clean(dir)
	if dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				err = syscall.ENOTDIR // a file where a directory should be
			}
			return "", fsError("create the parent directories of", arg, err)
		}
	}
	newPerm, keepPerm, keep := fs.FileMode(0o644), fs.FileMode(0), false
	switch fi, err := r.Lstat(rel); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", fsError("write", arg, err)
	case fi.IsDir():
		return "", fmt.Errorf("cannot write %q: it is a directory; name a file inside it", arg)
	case fi.Mode()&fs.ModeSymlink != 0:
		// resolve replaces links that lead to something existing inside
		// the root by their target; what is left dangles or escapes.
		return "", fmt.Errorf("cannot write %q: it is a symbolic link that does not lead to an existing file inside the workspace; write to a regular file path instead", arg)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("cannot write %q: it is not a regular file", arg)
	default:
		keepPerm, keep = fi.Mode().Perm(), true
		newPerm = 0o600
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, "."+string(cutUTF8([]byte(base), 100))+".tmp-"+rand.Text()[:12])
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, newPerm)
	if err != nil {
		return "", fsError("write", arg, err)
	}
	_, err = f.WriteString(content)
	if err == nil && keep {
		err = f.Chmod(keepPerm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = r.Rename(tmp, rel)
	}
	if err != nil {
		_ = r.Remove(tmp)
		return "", fsError("write", arg, err)
	}
	return fmt.Sprintf("wrote %d bytes to %s", len(content), display), nil
}

// opened is a path argument opened for reading inside the root.
type opened struct {
	root *os.Root
	rel  string // the path relative to the real root
	f    *os.File
	fi   fs.FileInfo
}

func (o opened) close() { o.f.Close(); o.root.Close() }

// openStat resolves a path argument, opens it for reading inside the root
// and stats it. verb words the errors ("read", "list").
func (w *workspace) openStat(verb, arg string) (opened, error) {
	rel, _, err := w.resolve(arg)
	if err != nil {
		return opened{}, err
	}
	r, err := w.openRoot()
	if err != nil {
		return opened{}, err
	}
	f, err := r.OpenFile(rel, openReadFlags, 0)
	if err != nil {
		r.Close()
		return opened{}, fsError(verb, arg, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		r.Close()
		return opened{}, fsError(verb, arg, err)
	}
	return opened{root: r, rel: rel, f: f, fi: fi}, nil
}
