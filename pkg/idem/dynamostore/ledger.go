package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Ledger is an idem.Ledger on a global table in multi-Region strong
// consistency (MRSC). Its conditional writes see the latest item in
// every Region. Each claim is one item: the key, the Region, CreatedAt,
// Until, the Heir, if any, the request's fingerprint, a release's end,
// and whether the command settled. MRSC has no TTL, so claims stay until
// deleted.
type Ledger struct {
	db           DynamoDBAPI
	table        *string
	yields       func(idem.Key, string) bool
	unreplicated func(idem.Key) time.Time
}

var _ idem.Ledger = (*Ledger)(nil)

// LedgerOptions configure a Ledger.
type LedgerOptions struct {
	// Yields is the Ledger's Yields: may another Region write the
	// records region claimed? It should be true once region failed
	// over and its writes replicated. Default: no Region yields.
	Yields func(key idem.Key, region string) bool
	// Unreplicated is the Ledger's Unreplicated: since when may a
	// Region not yet drained hold newer writes of key's records?
	// Default: none may.
	Unreplicated func(key idem.Key) time.Time
}

// The ledger's attributes: its key holds Key.String().
const (
	ledgerKey      = "pk"
	ledgerRegion   = "rg"
	ledgerCreated  = "ct"
	ledgerUntil    = "un"
	ledgerHeir     = "hr"
	ledgerFP       = "fp"
	ledgerRelease  = "rl"
	ledgerReleaser = "rb"
	ledgerSettled  = "sd"
)

// errNoClaim: a write conditioned on a claim found none.
var errNoClaim = errors.New("idem: no claim")

// NewLedger returns a Ledger on table (LedgerTableInput).
func NewLedger(db DynamoDBAPI, table string, optFns ...func(*LedgerOptions)) (*Ledger, error) {
	if db == nil {
		return nil, errors.New("idem: nil DynamoDB client")
	}
	if table == "" {
		return nil, errors.New("idem: empty ledger table name")
	}
	var o LedgerOptions
	for _, fn := range optFns {
		fn(&o)
	}
	return &Ledger{db: db, table: aws.String(table), yields: o.Yields, unreplicated: o.Unreplicated}, nil
}

// LedgerTableInput is the CreateTable request of a ledger table: a string
// partition key, on demand. Make it a global table in multi-Region strong
// consistency before the first claim.
func LedgerTableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(ledgerKey), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(ledgerKey), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}
}

// Claim records c in one conditional PutItem, unless a live claim of key
// stands. A claim is live while its End is after c.CreatedAt. It is
// returned if c.Region holds it. A yielding holder's live claim passes to
// c.Region, in a second PutItem naming it the Heir. Otherwise Claim gives
// *ClaimedElsewhereError. An expired claim another Region holds is
// replaced, in a second PutItem, only once it yields. After an error
// wrapping idem.ErrUnavailable, whether c was recorded is unknown.
func (l *Ledger) Claim(ctx context.Context, key idem.Key, c idem.Claim) (idem.Claim, error) {
	old, err := l.put(ctx, key, c, "attribute_not_exists(#pk) OR ((#until <= :now OR #rel <= :now) AND "+
		"((#rg = :rg AND attribute_not_exists(#hr)) OR #hr = :rg))",
		map[string]string{"#pk": ledgerKey, "#until": ledgerUntil, "#rel": ledgerRelease, "#rg": ledgerRegion, "#hr": ledgerHeir},
		map[string]types.AttributeValue{":now": millis(c.CreatedAt), ":rg": str(c.Region)})
	switch {
	case err != nil || old == nil:
		return c, err
	case old.End().After(c.CreatedAt) && old.Holder() == c.Region:
		return *old, nil
	case !l.Yields(key, old.Holder()):
		return idem.Claim{}, &idem.ClaimedElsewhereError{Region: old.Holder()}
	}
	// A yielding holder's claim: its records replicated. A live one
	// passes to c.Region; an expired one gives way to c.
	names := map[string]string{"#rg": ledgerRegion, "#ct": ledgerCreated, "#hr": ledgerHeir}
	values := map[string]types.AttributeValue{":rg": str(old.Region), ":ct": millis(old.CreatedAt)}
	cond := "#rg = :rg AND #ct = :ct AND attribute_not_exists(#hr)"
	if old.Heir != "" {
		cond, values[":hr"] = "#rg = :rg AND #ct = :ct AND #hr = :hr", str(old.Heir)
	}
	next, again := c, (*idem.Claim)(nil)
	if old.End().After(c.CreatedAt) {
		// Only the Heir is written. A release's end cleared since the
		// claim was read stays cleared.
		next, next.Heir, values[":heir"] = *old, c.Region, str(c.Region)
		again, err = l.update(ctx, key, "SET #hr = :heir", cond, names, values)
	} else {
		again, err = l.put(ctx, key, next, cond, names, values)
	}
	switch {
	case err != nil || again == nil:
		return next, err
	case again.Holder() == c.Region && again.CreatedAt.Equal(next.CreatedAt):
		return *again, nil // this very write, its answer lost
	}
	return idem.Claim{}, &idem.ClaimedElsewhereError{Region: again.Holder()} // claimed meanwhile
}

// Extend moves the Until of key's claim created at created to until, in
// one conditional UpdateItem, if region holds it. It keeps a release's
// end. A yielding holder's claim passes to region, in a second
// UpdateItem naming it the Heir. A claim already lasting until then is
// left as it is. After an error wrapping idem.ErrUnavailable, whether the
// claim moved is unknown.
func (l *Ledger) Extend(ctx context.Context, key idem.Key, region string, created, until time.Time) error {
	names := map[string]string{"#pk": ledgerKey, "#rg": ledgerRegion, "#ct": ledgerCreated, "#un": ledgerUntil, "#hr": ledgerHeir}
	values := map[string]types.AttributeValue{":rg": str(region), ":ct": millis(created), ":un": millis(until)}
	old, err := l.update(ctx, key, "SET #rg = if_not_exists(#rg, :rg), #ct = if_not_exists(#ct, :ct), #un = :un",
		"attribute_not_exists(#pk) OR (#ct = :ct AND #un < :un AND ((#rg = :rg AND attribute_not_exists(#hr)) OR #hr = :rg))", names, values)
	switch {
	case err != nil || old == nil:
		return err
	case !old.CreatedAt.Equal(time.UnixMilli(created.UnixMilli())):
		return &idem.ClaimedElsewhereError{Region: old.Holder()} // another command's claim
	case old.Holder() == region:
		return nil // it lasts long enough
	case !l.Yields(key, old.Holder()):
		return &idem.ClaimedElsewhereError{Region: old.Holder()}
	}
	// A yielding holder's claim passes to region, lasting at least as
	// long as it did.
	delete(names, "#pk")
	values[":old"] = str(old.Region)
	if old.Until.After(until) {
		values[":un"] = millis(old.Until)
	}
	cond := "#rg = :old AND #ct = :ct AND attribute_not_exists(#hr)"
	if old.Heir != "" {
		cond, values[":oldhr"] = "#rg = :old AND #ct = :ct AND #hr = :oldhr", str(old.Heir)
	}
	again, err := l.update(ctx, key, "SET #un = :un, #hr = :rg", cond, names, values)
	switch {
	case err != nil || again == nil:
		return err
	case again.Holder() == region && again.CreatedAt.Equal(old.CreatedAt) && !again.Until.Before(until):
		return nil // this very write, its answer lost
	}
	return &idem.ClaimedElsewhereError{Region: again.Holder()} // claimed meanwhile
}

// Release sets the release's end on key's claim created at created, and
// the releasing lease's token, or clears them, in one conditional
// UpdateItem, if region holds it. A clear naming a token removes only
// that lease's end; one naming none removes the settled mark too. A
// settled claim refuses an end: ErrLeaseLost. After an error wrapping
// idem.ErrUnavailable, whether it was written is unknown.
func (l *Ledger) Release(ctx context.Context, key idem.Key, region string, created, until time.Time, token string) error {
	names := map[string]string{"#rg": ledgerRegion, "#ct": ledgerCreated, "#hr": ledgerHeir, "#rel": ledgerRelease, "#rb": ledgerReleaser}
	values := map[string]types.AttributeValue{":rg": str(region), ":ct": millis(created)}
	cond := "#ct = :ct AND ((#rg = :rg AND attribute_not_exists(#hr)) OR #hr = :rg)"
	set := "REMOVE #rel, #rb, #sd"
	names["#sd"] = ledgerSettled
	switch {
	case !until.IsZero():
		set, values[":rel"], values[":rb"] = "SET #rel = :rel, #rb = :rb", millis(until), str(token)
		cond += " AND attribute_not_exists(#sd)"
	case token != "":
		set, cond, values[":rb"] = "REMOVE #rel, #rb", cond+" AND #rb = :rb", str(token)
		delete(names, "#sd")
	}
	old, err := l.update(ctx, key, set, cond, names, values)
	switch {
	case errors.Is(err, errNoClaim):
		return nil // nothing holds the key
	case err != nil || old == nil:
		return err
	case old.Holder() != region || !old.CreatedAt.Equal(time.UnixMilli(created.UnixMilli())):
		return &idem.ClaimedElsewhereError{Region: old.Holder()}
	case !until.IsZero() && old.Settled:
		return fmt.Errorf("idem: ledger release %s: the command settled: %w", key.LogHash(), idem.ErrLeaseLost)
	}
	return nil // the end is another lease's, or gone: token's clear is done
}

// Settle clears any release's end on key's claim created at created,
// and marks it settled, in one conditional UpdateItem, if region holds
// it. After an error wrapping idem.ErrUnavailable, whether it was
// written is unknown.
func (l *Ledger) Settle(ctx context.Context, key idem.Key, region string, created time.Time) error {
	names := map[string]string{"#rg": ledgerRegion, "#ct": ledgerCreated, "#hr": ledgerHeir, "#rel": ledgerRelease, "#rb": ledgerReleaser, "#sd": ledgerSettled}
	values := map[string]types.AttributeValue{":rg": str(region), ":ct": millis(created), ":sd": &types.AttributeValueMemberBOOL{Value: true}}
	old, err := l.update(ctx, key, "SET #sd = :sd REMOVE #rel, #rb", "#ct = :ct AND ((#rg = :rg AND attribute_not_exists(#hr)) OR #hr = :rg)", names, values)
	switch {
	case errors.Is(err, errNoClaim):
		return nil // nothing holds the key
	case err != nil || old == nil:
		return err
	}
	return &idem.ClaimedElsewhereError{Region: old.Holder()}
}

// update applies set to key's claim under cond. A failed condition
// returns the claim that stood, with nothing written.
func (l *Ledger) update(ctx context.Context, key idem.Key, set, cond string, names map[string]string, values map[string]types.AttributeValue) (*idem.Claim, error) {
	_, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           l.table,
		Key:                                 map[string]types.AttributeValue{ledgerKey: str(key.String())},
		UpdateExpression:                    aws.String(set),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	return l.refused(key, err)
}

// put writes c under cond. A failed condition returns the claim that
// stood, with nothing written.
func (l *Ledger) put(ctx context.Context, key idem.Key, c idem.Claim, cond string, names map[string]string, values map[string]types.AttributeValue) (*idem.Claim, error) {
	_, err := l.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           l.table,
		Item:                                claimItem(key, c),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	return l.refused(key, err)
}

// refused explains a write's err: nil, unavailable, or the claim that
// stood against its condition.
func (l *Ledger) refused(key idem.Key, err error) (*idem.Claim, error) {
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil, nil
	case !errors.As(err, &ccf):
		return nil, fmt.Errorf("idem: ledger claim %s: %w", key.LogHash(), AsUnavailable(err))
	case len(ccf.Item) == 0:
		return nil, fmt.Errorf("idem: ledger claim %s: %w", key.LogHash(), errNoClaim)
	}
	old, err := decodeClaim(ccf.Item)
	if err != nil {
		return nil, fmt.Errorf("idem: ledger claim %s: %w", key.LogHash(), err)
	}
	return &old, nil
}

// claimItem is c's item under key; a claim no Region inherited has no
// Heir attribute, one without a fingerprint none either.
func claimItem(key idem.Key, c idem.Claim) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		ledgerKey: str(key.String()), ledgerRegion: str(c.Region), ledgerCreated: millis(c.CreatedAt), ledgerUntil: millis(c.Until),
	}
	if c.Heir != "" {
		item[ledgerHeir] = str(c.Heir)
	}
	if c.Fingerprint != (idem.Fingerprint{}) {
		item[ledgerFP] = fpAttr(c.Fingerprint)
	}
	if !c.ReleasedUntil.IsZero() {
		item[ledgerRelease] = millis(c.ReleasedUntil)
	}
	if c.ReleasedBy != "" {
		item[ledgerReleaser] = str(c.ReleasedBy)
	}
	if c.Settled {
		item[ledgerSettled] = &types.AttributeValueMemberBOOL{Value: true}
	}
	return item
}

// Yields reports whether records region claimed may be written
// elsewhere (LedgerOptions.Yields).
func (l *Ledger) Yields(key idem.Key, region string) bool {
	return l.yields != nil && l.yields(key, region)
}

// Unreplicated is LedgerOptions.Unreplicated's answer for key.
func (l *Ledger) Unreplicated(key idem.Key) time.Time {
	if l.unreplicated == nil {
		return time.Time{}
	}
	return l.unreplicated(key)
}

func decodeClaim(item map[string]types.AttributeValue) (idem.Claim, error) {
	region, ok := item[ledgerRegion].(*types.AttributeValueMemberS)
	if !ok {
		return idem.Claim{}, errors.New("a claim without its Region")
	}
	created, err := numberAttr(item, ledgerCreated)
	if err != nil {
		return idem.Claim{}, err
	}
	until, err := numberAttr(item, ledgerUntil)
	if err != nil {
		return idem.Claim{}, err
	}
	c := idem.Claim{Region: region.Value, CreatedAt: time.UnixMilli(created), Until: time.UnixMilli(until)}
	if heir, ok := item[ledgerHeir].(*types.AttributeValueMemberS); ok {
		c.Heir = heir.Value
	}
	if fp, ok := item[ledgerFP].(*types.AttributeValueMemberB); ok {
		copy(c.Fingerprint[:], fp.Value)
	}
	if rel, err := numberAttr(item, ledgerRelease); err == nil {
		c.ReleasedUntil = time.UnixMilli(rel)
	}
	if by, ok := item[ledgerReleaser].(*types.AttributeValueMemberS); ok {
		c.ReleasedBy = by.Value
	}
	if sd, ok := item[ledgerSettled].(*types.AttributeValueMemberBOOL); ok {
		c.Settled = sd.Value
	}
	return c, nil
}
