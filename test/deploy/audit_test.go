package deploy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// streams checks that each of tables has the stream the audit trail reads
// (want, audit.StreamInput). The audit function must read it so that
// nothing is skipped. It starts from the oldest change. A failed batch is
// retried until written, split to find a change that fails it. What would
// be discarded goes to the trail's dead-letter queue.
func (c *checker) streams(want *dynamodb.UpdateTableInput, tables ...string) {
	view := string(want.StreamSpecification.StreamViewType)
	read := map[string]map[string]any{} // by table, the event on its stream
	for name, e := range asMap(c.props(auditFn)["Events"]) {
		if asMap(e)["Type"] != "DynamoDB" {
			continue
		}
		p := asMap(asMap(e)["Properties"])
		branches := asList(asMap(p["Stream"])["Fn::If"])
		var att []any
		if len(branches) == 3 {
			att = asList(asMap(branches[1])["Fn::GetAtt"])
		}
		if len(att) != 2 || att[1] != "StreamArn" || show(p["Stream"]) != show(replicaStream(fmt.Sprint(att[0]))) {
			c.fail("%s event %s reads %s, want a table's StreamArn, or its replica's stream", auditFn, name, show(p["Stream"]))
			continue
		}
		read[fmt.Sprint(att[0])] = p
	}
	for _, t := range tables {
		c.equal(t+" StreamSpecification", c.props(t)["StreamSpecification"], map[string]any{"StreamViewType": view})
		p, ok := read[t]
		if !ok {
			c.fail("%s has no event on %s's stream", auditFn, t)
			continue
		}
		c.equal(auditFn+" on "+t+" StartingPosition", p["StartingPosition"], "TRIM_HORIZON")
		c.equal(auditFn+" on "+t+" MaximumRetryAttempts", p["MaximumRetryAttempts"], -1)
		c.equal(auditFn+" on "+t+" MaximumRecordAgeInSeconds", p["MaximumRecordAgeInSeconds"], -1)
		c.equal(auditFn+" on "+t+" BisectBatchOnFunctionError", p["BisectBatchOnFunctionError"], true)
		c.equal(auditFn+" on "+t+" DestinationConfig", p["DestinationConfig"],
			map[string]any{"OnFailure": map[string]any{"Type": "SQS", "Destination": getAtt(auditDLQ, "Arn")}})
	}
	if len(read) != len(tables) {
		c.fail("%s reads %d streams, want %d", auditFn, len(read), len(tables))
	}
}

// replicaStream is the stream of table: the stack's own table's, or, in
// a deployment in several Regions, its replica's in this Region
// (template.yaml's Global*Table and Global*StreamLabel parameters).
func replicaStream(table string) any {
	global := "Global" + strings.TrimSuffix(table, "Table")
	return map[string]any{"Fn::If": []any{"OwnsTables",
		getAtt(table, "StreamArn"),
		map[string]any{"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${" + global + "Table}/stream/${" + global + "StreamLabel}"},
	}}
}

// trail checks the bucket the entries are kept in. Its Object Lock is the
// code's (lock), its retention the parameter AuditRetentionDays, whose
// default is the code's. No lifecycle rule expires an entry sooner. It is
// versioned, private, and kept when the stack goes. The index's retention
// defaults to the code's, and takes what the code takes: never more than
// the archive's least retention.
func (c *checker) trail(lock *s3.PutObjectLockConfigurationInput, retentionDays, indexDays, indexMaxDays int) {
	params := asMap(c.tmpl["Parameters"])
	c.equal("AuditRetentionDays Default", fmt.Sprint(asMap(params["AuditRetentionDays"])["Default"]), strconv.Itoa(retentionDays))
	c.equal("AuditIndexDays Default", fmt.Sprint(asMap(params["AuditIndexDays"])["Default"]), strconv.Itoa(indexDays))
	c.equal("AuditIndexDays MinValue", fmt.Sprint(asMap(params["AuditIndexDays"])["MinValue"]), "1")
	c.equal("AuditIndexDays MaxValue", fmt.Sprint(asMap(params["AuditIndexDays"])["MaxValue"]), strconv.Itoa(indexMaxDays))
	least, err := strconv.Atoi(fmt.Sprint(asMap(params["AuditRetentionDays"])["MinValue"]))
	if err != nil || least < indexMaxDays {
		c.fail("AuditRetentionDays takes from %v days, AuditIndexDays up to %d: the index may outlive the archive", asMap(params["AuditRetentionDays"])["MinValue"], indexMaxDays)
	}
	retention := map[string]any{"Ref": "AuditRetentionDays"}
	cfg := lock.ObjectLockConfiguration
	if aws.ToInt32(cfg.Rule.DefaultRetention.Days) != int32(retentionDays) {
		c.fail("audit.LockInput keeps %d days, not audit.DefaultRetentionDays", aws.ToInt32(cfg.Rule.DefaultRetention.Days))
	}
	b := c.props(auditBucket)
	c.equal(auditBucket+" ObjectLockEnabled", b["ObjectLockEnabled"], true)
	c.equal(auditBucket+" ObjectLockConfiguration", b["ObjectLockConfiguration"], map[string]any{
		"ObjectLockEnabled": string(cfg.ObjectLockEnabled),
		"Rule":              map[string]any{"DefaultRetention": map[string]any{"Mode": string(cfg.Rule.DefaultRetention.Mode), "Days": retention}},
	})
	c.equal(auditBucket+" VersioningConfiguration", b["VersioningConfiguration"], map[string]any{"Status": "Enabled"})
	c.equal(auditBucket+" DeletionPolicy", c.resource(auditBucket)["DeletionPolicy"], "Retain")
	c.equal(auditBucket+" PublicAccessBlockConfiguration", b["PublicAccessBlockConfiguration"], map[string]any{
		"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true,
	})
	for _, r := range asList(asMap(b["LifecycleConfiguration"])["Rules"]) {
		r := asMap(r)
		if days, ok := r["ExpirationInDays"]; ok {
			c.equal(auditBucket+" lifecycle rule "+fmt.Sprint(r["Id"])+" ExpirationInDays", days, retention)
		}
		if r["ExpirationDate"] != nil || r["Transitions"] != nil {
			c.fail("%s lifecycle rule %v expires or moves entries by another rule than their retention", auditBucket, r["Id"])
		}
	}
}

// trailAlarms checks that the trail's failures alarm: a batch the audit
// function could not write (Errors), a trail behind its streams
// (IteratorAge), and changes the streams discarded (the dead-letter
// queue's messages).
func (c *checker) trailAlarms() {
	want := map[string]bool{"AWS/Lambda Errors": false, "AWS/Lambda IteratorAge": false, "AWS/SQS ApproximateNumberOfMessagesVisible": false}
	for id, r := range asMap(c.tmpl["Resources"]) {
		if asMap(r)["Type"] != "AWS::CloudWatch::Alarm" {
			continue
		}
		p := c.props(id)
		for _, d := range asList(p["Dimensions"]) {
			v := asMap(d)["Value"]
			if show(v) == show(map[string]any{"Ref": auditFn}) || show(v) == show(getAtt(auditDLQ, "QueueName")) {
				want[fmt.Sprint(p["Namespace"], " ", p["MetricName"])] = true
			}
		}
	}
	for metric, found := range want {
		if !found {
			c.fail("no alarm watches the audit trail's %s", metric)
		}
	}
}

// appendOnly checks that no function may change or delete the trail. A
// role may only add objects to the bucket, under entries/, and write the
// index's items. The bucket's policy may only deny.
func (c *checker) appendOnly() {
	entries := map[string]any{"Fn::Sub": "${" + auditBucket + ".Arn}/entries/*"}
	for _, id := range c.functions() {
		for _, st := range c.statements(id) {
			_, st := unwrapIf(st)
			s := asMap(st)
			for _, action := range strs(s["Action"]) {
				for _, res := range resources(s["Resource"]) {
					s3Action := strings.HasPrefix(action, "s3:")
					switch {
					case s3Action && (action != "s3:PutObject" || res != auditBucket):
						c.fail("%s may %s on %s: a role may only add objects to the trail's bucket", id, action, res)
					case s3Action && !equalAny(s["Resource"], entries):
						c.fail("%s may add objects to %s: want under entries/ alone", id, show(s["Resource"]))
					case res == auditIndex && action != "dynamodb:PutItem":
						c.fail("%s may %s on %s: a role may only write the index's items", id, action, res)
					}
				}
			}
		}
	}
	for id, r := range asMap(c.tmpl["Resources"]) {
		if asMap(r)["Type"] != "AWS::S3::BucketPolicy" {
			continue
		}
		for _, st := range asList(asMap(c.props(id)["PolicyDocument"])["Statement"]) {
			if asMap(st)["Effect"] != "Deny" {
				c.fail("%s allows %s: the trail's bucket policy may only deny", id, show(st))
			}
		}
	}
}

// equalAny reports whether v is want, or a list of want alone.
func equalAny(v, want any) bool {
	if l := asList(v); len(l) == 1 {
		v = l[0]
	}
	return show(v) == show(want)
}
