package eventsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/google/uuid"
)

// StreamHandler is a Lambda handler for DynamoDB stream events.
type StreamHandler func(ctx context.Context, ev events.DynamoDBEvent) error

// StreamAPI is the part of *dynamodbstreams.Client the stream poller uses.
type StreamAPI interface {
	DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

var _ StreamAPI = (*dynamodbstreams.Client)(nil)

// Defaults of the StreamOptions.
const (
	DefaultStreamBatchSize = 100
	DefaultStreamInterval  = time.Second
)

// StreamOptions configure a StreamPoller. Zero fields take the defaults.
type StreamOptions struct {
	// BatchSize is the most records one invocation gets, 1 to 1,000.
	// Default DefaultStreamBatchSize.
	BatchSize int
	// Interval is the pause after a poll that found nothing. Default
	// DefaultStreamInterval.
	Interval time.Duration
	// Timeout is the function timeout. Default DefaultTimeout.
	Timeout time.Duration
	// ErrorBackoff is the pause after a failed poll or invocation.
	// Default DefaultErrorBackoff.
	ErrorBackoff time.Duration
	// Logger receives one record per batch and every failure. Default:
	// discard.
	Logger *slog.Logger
}

// StreamPoller feeds one table's stream to one handler, as Lambda's
// DynamoDB event source does with unlimited retries. A batch whose
// invocation fails is handed over again, whole, until it succeeds.
// Nothing after it in its shard goes first. Run it once at a time.
type StreamPoller struct {
	api    StreamAPI
	arn    string
	region string
	h      StreamHandler
	opt    StreamOptions
	// done is, by shard, the sequence number of the last record handled.
	done map[string]string
}

// NewStream returns a StreamPoller of the stream streamARN (a table's
// LatestStreamArn), from the oldest record it holds.
func NewStream(api StreamAPI, streamARN string, h StreamHandler, optFns ...func(*StreamOptions)) (*StreamPoller, error) {
	if api == nil || h == nil {
		return nil, errors.New("eventsource: stream poller needs a client and a handler")
	}
	o := StreamOptions{BatchSize: DefaultStreamBatchSize, Interval: DefaultStreamInterval, Timeout: DefaultTimeout, ErrorBackoff: DefaultErrorBackoff}
	for _, fn := range optFns {
		fn(&o)
	}
	if o.BatchSize < 1 || o.BatchSize > 1000 || o.Interval <= 0 || o.Timeout <= 0 || o.ErrorBackoff <= 0 {
		return nil, fmt.Errorf("eventsource: stream options out of range: %+v", o)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	parts := strings.SplitN(streamARN, ":", 6) // arn:partition:dynamodb:region:account:table/NAME/stream/LABEL
	if len(parts) != 6 || !strings.Contains(parts[5], "/stream/") {
		return nil, fmt.Errorf("eventsource: stream arn %q is malformed", streamARN)
	}
	return &StreamPoller{api: api, arn: streamARN, region: parts[3], h: h, opt: o, done: map[string]string{}}, nil
}

// StreamBatch is what one poll did.
type StreamBatch struct {
	// Records is how many records the handler got; Failed how many of
	// them an invocation failed, to be handed over again.
	Records, Failed int
}

// Run polls until ctx is done, then returns nil.
func (p *StreamPoller) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		b, err := p.Poll(ctx)
		pause := time.Duration(0)
		switch {
		case err != nil && ctx.Err() == nil:
			p.opt.Logger.WarnContext(ctx, "stream poll failed", "stream_arn", p.arn, "error", err.Error())
			pause = p.opt.ErrorBackoff
		case b.Failed > 0:
			pause = p.opt.ErrorBackoff
		case b.Records == 0:
			pause = p.opt.Interval
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	return nil
}

// Poll hands each shard's next batch to the handler. A failed invocation
// is logged at ERROR, as Lambda counts it in the function's Errors, and
// leaves its shard where it was.
func (p *StreamPoller) Poll(ctx context.Context) (StreamBatch, error) {
	out, err := p.api.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(p.arn)})
	if err != nil {
		return StreamBatch{}, fmt.Errorf("eventsource: describe stream: %w", err)
	}
	var b StreamBatch
	for _, shard := range out.StreamDescription.Shards {
		n, failed, err := p.pollShard(ctx, aws.ToString(shard.ShardId))
		if err != nil {
			return b, err
		}
		b.Records += n
		if failed {
			b.Failed += n
		}
	}
	return b, nil
}

// pollShard hands shard's next batch to the handler, and reports how many
// records it held and whether the invocation failed.
func (p *StreamPoller) pollShard(ctx context.Context, shard string) (int, bool, error) {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(p.arn), ShardId: aws.String(shard), ShardIteratorType: types.ShardIteratorTypeTrimHorizon}
	if seq, ok := p.done[shard]; ok {
		in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(seq)
	}
	it, err := p.api.GetShardIterator(ctx, in)
	if err != nil {
		return 0, false, fmt.Errorf("eventsource: shard iterator: %w", err)
	}
	out, err := p.api.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator, Limit: aws.Int32(int32(p.opt.BatchSize))})
	if err != nil {
		return 0, false, fmt.Errorf("eventsource: get records: %w", err)
	}
	if len(out.Records) == 0 {
		return 0, false, nil
	}
	ev := events.DynamoDBEvent{Records: make([]events.DynamoDBEventRecord, len(out.Records))}
	for i, r := range out.Records {
		ev.Records[i] = p.record(r)
	}
	requestID := uuid.NewString()
	if err := p.invoke(ctx, requestID, ev); err != nil {
		p.opt.Logger.ErrorContext(ctx, "stream batch invocation failed; the batch is handed over again",
			"stream_arn", p.arn, "request_id", requestID, "records", len(ev.Records), "error", err.Error())
		return len(ev.Records), true, nil
	}
	p.done[shard] = ev.Records[len(ev.Records)-1].Change.SequenceNumber
	p.opt.Logger.InfoContext(ctx, "stream batch", "stream_arn", p.arn, "request_id", requestID, "records", len(ev.Records))
	return len(ev.Records), false, nil
}

// invoke runs the handler as one Lambda invocation.
func (p *StreamPoller) invoke(ctx context.Context, requestID string, ev events.DynamoDBEvent) (err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opt.Timeout)
	defer cancel()
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: requestID})
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("eventsource: handler panicked: %v", r)
		}
	}()
	if err := p.h(ctx, ev); err != nil {
		return fmt.Errorf("eventsource: handler: %w", err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("eventsource: task timed out after %s", p.opt.Timeout)
	}
	return nil
}

// record is r as Lambda puts it in a DynamoDB event.
func (p *StreamPoller) record(r types.Record) events.DynamoDBEventRecord {
	out := events.DynamoDBEventRecord{
		AWSRegion: p.region, EventID: aws.ToString(r.EventID), EventName: string(r.EventName),
		EventSource: aws.ToString(r.EventSource), EventVersion: aws.ToString(r.EventVersion), EventSourceArn: p.arn,
	}
	if id := r.UserIdentity; id != nil {
		out.UserIdentity = &events.DynamoDBUserIdentity{Type: aws.ToString(id.Type), PrincipalID: aws.ToString(id.PrincipalId)}
	}
	if c := r.Dynamodb; c != nil {
		out.Change = events.DynamoDBStreamRecord{
			Keys: image(c.Keys), NewImage: image(c.NewImage), OldImage: image(c.OldImage),
			SequenceNumber: aws.ToString(c.SequenceNumber), SizeBytes: aws.ToInt64(c.SizeBytes),
			StreamViewType: string(c.StreamViewType),
		}
		if c.ApproximateCreationDateTime != nil {
			// DynamoDB stamps a change to the second; moto, finer.
			out.Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: c.ApproximateCreationDateTime.Truncate(time.Second)}
		}
	}
	return out
}

// image is a stream's item as Lambda's events hold it.
func image(item map[string]types.AttributeValue) map[string]events.DynamoDBAttributeValue {
	if item == nil {
		return nil
	}
	out := make(map[string]events.DynamoDBAttributeValue, len(item))
	for name, v := range item {
		out[name] = attribute(v)
	}
	return out
}

func attribute(v types.AttributeValue) events.DynamoDBAttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return events.NewStringAttribute(v.Value)
	case *types.AttributeValueMemberN:
		return events.NewNumberAttribute(v.Value)
	case *types.AttributeValueMemberB:
		return events.NewBinaryAttribute(v.Value)
	case *types.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(v.Value)
	case *types.AttributeValueMemberSS:
		return events.NewStringSetAttribute(v.Value)
	case *types.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(v.Value)
	case *types.AttributeValueMemberBS:
		return events.NewBinarySetAttribute(v.Value)
	case *types.AttributeValueMemberL:
		list := make([]events.DynamoDBAttributeValue, len(v.Value))
		for i, e := range v.Value {
			list[i] = attribute(e)
		}
		return events.NewListAttribute(list)
	case *types.AttributeValueMemberM:
		return events.NewMapAttribute(image(v.Value))
	}
	return events.NewNullAttribute()
}
