package farm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// A job's files in the object store, each named <job id>/<name>.
const (
	FileImage      = "image"       // the start image as uploaded
	FileEndImage   = "end_image"   // the end image as uploaded
	FileInputVideo = "input_video" // the video to extend, as uploaded
	FileCheckpoint = "checkpoint"  // framepack.Checkpoint after the last finished section
	FilePartial    = "partial.mp4" // the video so far
	FileVideo      = "video.mp4"   // the finished video
	FileSettings   = "settings.json"
	FileThumbnail  = "thumbnail.png"
)

var fileNames = []string{FileImage, FileEndImage, FileInputVideo, FileCheckpoint, FilePartial, FileVideo, FileSettings, FileThumbnail}

// ErrNoFile is a job's file that is not stored.
var ErrNoFile = errors.New("no such file")

func objectName(id, name string) string { return id + "/" + name }

// PutFile stores one of job id's files, replacing any before.
func (f *Farm) PutFile(ctx context.Context, id, name string, r io.Reader) (int64, error) {
	info, err := f.files.Put(ctx, jetstream.ObjectMeta{Name: objectName(id, name)}, r)
	if err != nil {
		return 0, fmt.Errorf("farm: storing %s of job %s: %w", name, id, err)
	}
	return int64(info.Size), nil
}

// PutBytes stores b as one of job id's files.
func (f *Farm) PutBytes(ctx context.Context, id, name string, b []byte) error {
	err := retry(ctx, func(ctx context.Context) error {
		_, err := f.files.PutBytes(ctx, objectName(id, name), b)
		return err
	})
	if err != nil {
		return fmt.Errorf("farm: storing %s of job %s: %w", name, id, err)
	}
	return nil
}

// GetBytes reads one of job id's files whole.
func (f *Farm) GetBytes(ctx context.Context, id, name string) ([]byte, error) {
	var b []byte
	err := retry(ctx, func(ctx context.Context) (err error) {
		b, err = f.files.GetBytes(ctx, objectName(id, name))
		return err
	}, jetstream.ErrObjectNotFound)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrNoFile
	}
	if err != nil {
		return nil, fmt.Errorf("farm: reading %s of job %s: %w", name, id, err)
	}
	return b, nil
}

// OpenFile opens one of job id's files for reading, with its size.
func (f *Farm) OpenFile(ctx context.Context, id, name string) (io.ReadCloser, int64, error) {
	r, err := f.files.Get(ctx, objectName(id, name))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, 0, ErrNoFile
	}
	if err != nil {
		return nil, 0, fmt.Errorf("farm: reading %s of job %s: %w", name, id, err)
	}
	info, err := r.Info()
	if err != nil {
		r.Close()
		return nil, 0, err
	}
	return r, int64(info.Size), nil
}

// HasFile tells whether one of job id's files is stored.
func (f *Farm) HasFile(ctx context.Context, id, name string) bool {
	_, err := f.files.GetInfo(ctx, objectName(id, name))
	return err == nil
}

func (f *Farm) deleteFiles(ctx context.Context, id string, names ...string) {
	for _, n := range names {
		f.files.Delete(ctx, objectName(id, n))
	}
}

// DeleteFiles removes some of job id's files (those missing are skipped).
func (f *Farm) DeleteFiles(ctx context.Context, id string, names ...string) {
	f.deleteFiles(ctx, id, names...)
}

// Objects lists the names of the objects job id has in the file store.
func (f *Farm) Objects(ctx context.Context, id string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*opTimeout)
	defer cancel()
	list, err := f.files.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("farm: listing the files: %w", err)
	}
	var names []string
	for _, o := range list {
		if n, ok := strings.CutPrefix(o.Name, id+"/"); ok && !o.Deleted {
			names = append(names, n)
		}
	}
	return names, nil
}

// StoredBytes is what the file store holds now.
func (f *Farm) StoredBytes(ctx context.Context) (int64, error) {
	st, err := f.files.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("farm: the file store: %w", err)
	}
	return int64(st.Size()), nil
}
