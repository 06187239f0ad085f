package e2b

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"syscall"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
)

// httpSandbox returns the request's environment, or answers its failure
// ({code, message}: 401, 403 for another user, 404) and nil.
func httpSandbox(w http.ResponseWriter, r *http.Request) *hostfork.Env {
	sb, _ := r.Context().Value(sandboxKey{}).(sandboxOf)
	var ue userErr
	switch {
	case sb.err == nil && sb.env != nil:
		return sb.env
	case errors.As(sb.err, &ue):
		fail(w, http.StatusForbidden, "%v", sb.err)
	case errors.Is(sb.err, api.ErrForbidden):
		fail(w, http.StatusUnauthorized, "%v", sb.err)
	default:
		httpFail(w, sb.err)
	}
	return nil
}

// httpFail answers a library error with its status.
func httpFail(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, api.ErrNotFound), errors.Is(err, api.ErrEnvNotActive):
		status = http.StatusNotFound
	case errors.Is(err, api.ErrInvalid), errors.Is(err, api.ErrExists):
		status = http.StatusBadRequest
	case errors.Is(err, api.ErrForbidden):
		status = http.StatusForbidden
	case errors.Is(err, api.ErrStoreFull), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		status = http.StatusInsufficientStorage
	}
	fail(w, status, "%v", err)
}

// download answers GET /files?path=: the file's bytes (Range requests
// too).
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	env := httpSandbox(w, r)
	if env == nil {
		return
	}
	p := sandboxPath(r.URL.Query().Get("path"))
	f, err := env.ReadFile(r.Context(), p)
	if err != nil {
		httpFail(w, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		httpFail(w, err)
		return
	}
	if fi.IsDir() {
		fail(w, http.StatusBadRequest, "%s is a directory: list it (files.list), or read a file in it", p)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// writtenFile is one entry of POST /files' answer.
type writtenFile struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// errTooLarge: an upload passed the bound.
var errTooLarge = errors.New("upload too large")

// capped reads at most n bytes in all, then fails with errTooLarge (the
// file being written is then removed: nothing of it stays).
type capped struct {
	r io.Reader
	n int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.n <= 0 {
		// One byte more than allowed says the source is larger.
		var b [1]byte
		for range 100 {
			n, err := c.r.Read(b[:])
			if n > 0 {
				return 0, errTooLarge
			}
			if err != nil {
				return 0, err
			}
		}
		return 0, io.ErrNoProgress
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

// upload answers POST /files: one file as an application/octet-stream
// body at ?path=, or multipart "file" parts (at ?path=, else at each
// part's file name), each written whole or not at all, its missing
// directories made. At most Config.MaxUpload bytes in all.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	env := httpSandbox(w, r)
	if env == nil {
		return
	}
	for k := range r.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-metadata-") {
			fail(w, http.StatusBadRequest, "file metadata (%s) is not kept by hostfork's sandboxes: write the file without metadata", k)
			return
		}
	}
	limit := s.cfg.MaxUpload
	if limit <= 0 {
		limit = DefaultMaxUpload
	}
	tooLarge := func() {
		fail(w, http.StatusRequestEntityTooLarge, "the upload is larger than %d bytes, the most this server takes in one request (serve --e2b-max-upload); nothing was written", limit)
	}
	if r.ContentLength > limit+1<<20 { // a multipart body's framing is small
		tooLarge()
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit+1<<20)
	q := r.URL.Query().Get("path")
	body := &capped{r: r.Body, n: limit}
	ctype, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []writtenFile
	write := func(name string, src io.Reader) error {
		if name == "" {
			return fmt.Errorf("no path: give ?path= (or a file name in the multipart part): %w", api.ErrInvalid)
		}
		p := sandboxPath(name)
		if e, err := env.Stat(r.Context(), p); err == nil && e.Type == "dir" {
			return fmt.Errorf("%s is a directory: name a file in it: %w", p, api.ErrInvalid)
		}
		if _, err := mkdirAll(r.Context(), env, path.Dir(p)); err != nil {
			return err
		}
		if _, err := env.WriteFile(r.Context(), p, src, 0); err != nil {
			return err
		}
		out = append(out, writtenFile{Path: p, Name: path.Base(p), Type: "file"})
		return nil
	}
	var err error
	switch {
	case ctype == "multipart/form-data":
		mr, merr := r.MultipartReader()
		if merr != nil {
			fail(w, http.StatusBadRequest, "multipart body: %v", merr)
			return
		}
		for err == nil {
			part, perr := mr.NextPart()
			if perr == io.EOF {
				break
			}
			if perr != nil {
				err = fmt.Errorf("multipart body: %v: %w", perr, api.ErrInvalid)
				break
			}
			if part.FormName() != "file" {
				continue
			}
			name := q
			if name == "" {
				// The SDK names each file by its whole path (Part.FileName
				// would keep only its base).
				_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				name = dp["filename"]
			} else if len(out) > 0 {
				err = fmt.Errorf("several files for one ?path=: leave path out and name each part's file: %w", api.ErrInvalid)
				break
			}
			body.r = part
			err = write(name, body)
		}
	default:
		var src io.Reader = body
		if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
			zr, zerr := gzip.NewReader(r.Body)
			if zerr != nil {
				fail(w, http.StatusBadRequest, "gzip body: %v", zerr)
				return
			}
			body.r = zr
		}
		err = write(q, src)
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, errTooLarge), errors.As(err, &mbe):
		tooLarge()
	case err != nil:
		httpFail(w, err)
	case len(out) == 0:
		fail(w, http.StatusBadRequest, "no file in the request: send it as the body (application/octet-stream) or as multipart field \"file\"")
	default:
		writeJSON(w, http.StatusOK, out)
	}
}
