package audit

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// ArchiveAPI is the part of *s3.Client the archive uses.
type ArchiveAPI interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

var _ ArchiveAPI = (*s3.Client)(nil)

// Archive is the bucket that keeps the entries, under S3 Object Lock. Its
// default retention locks every object written. No one may change or
// delete one until that retention ends.
type Archive struct {
	api    ArchiveAPI
	bucket *string // the SDK only reads it
}

// NewArchive returns the archive in bucket.
func NewArchive(api ArchiveAPI, bucket string) (*Archive, error) {
	if api == nil || bucket == "" {
		return nil, errors.New("audit: the archive needs a client and a bucket")
	}
	return &Archive{api: api, bucket: aws.String(bucket)}, nil
}

// Prefix is where the entries' objects are, one folder a day (Athena's
// partition "day"): entries/day=YYYY-MM-DD/.
const Prefix = "entries/"

// objectName names the object of a batch's entries. The name holds the
// day of its first change, its table, its first sequence number and a
// hash of its events. A batch delivered again has the same name and the
// same entries. Another batch never has it.
func objectName(entries []Entry) string {
	h := sha256.New()
	for _, e := range entries {
		h.Write([]byte(e.Event))
		h.Write([]byte{0})
	}
	first := entries[0]
	return fmt.Sprintf("%sday=%s/%s-%s-%s.jsonl.gz", Prefix, first.At.Format("2006-01-02"), first.Table, first.Seq, hex.EncodeToString(h.Sum(nil)[:8]))
}

// put writes entries as the object name: one JSON line each, gzipped. S3
// needs a checksum to lock an object; the SDK sends a SHA-256.
func (a *Archive) put(ctx context.Context, name string, entries []Entry) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	enc := json.NewEncoder(zw)
	enc.SetEscapeHTML(false)
	for _, e := range entries {
		if err := enc.Encode(e); err != nil {
			return fmt.Errorf("audit: encode an entry: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("audit: compress: %w", err)
	}
	_, err := a.api.PutObject(ctx, &s3.PutObjectInput{
		Bucket: a.bucket, Key: aws.String(name), Body: bytes.NewReader(buf.Bytes()),
		ContentType: aws.String("application/gzip"), ChecksumAlgorithm: s3types.ChecksumAlgorithmSha256,
	})
	if err != nil {
		return fmt.Errorf("audit: put %s: %w", name, err)
	}
	return nil
}

// errGone: the archive no longer has an object.
var errGone = errors.New("audit: no such object")

// get reads the entries of the object name. One the archive no longer
// has is errGone.
func (a *Archive) get(ctx context.Context, name string) ([]Entry, error) {
	out, err := a.api.GetObject(ctx, &s3.GetObjectInput{Bucket: a.bucket, Key: aws.String(name)})
	if nsk := (*s3types.NoSuchKey)(nil); errors.As(err, &nsk) {
		return nil, fmt.Errorf("%w: %s: %w", errGone, name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("audit: get %s: %w", name, err)
	}
	defer out.Body.Close()
	zr, err := gzip.NewReader(out.Body)
	if err != nil {
		return nil, fmt.Errorf("audit: read %s: %w", name, err)
	}
	var entries []Entry
	lines := bufio.NewScanner(zr)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		var e Entry
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("audit: read %s: %w", name, err)
		}
		entries = append(entries, e)
	}
	if err := lines.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("audit: read %s: %w", name, err)
	}
	return entries, nil
}
