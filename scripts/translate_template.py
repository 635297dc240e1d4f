#!/usr/bin/env python3
"""Translates template.yaml with the SAM translator, offline, and prints the
resulting CloudFormation template as JSON, beside the source template
(for tests/template.rs). NAME=VALUE arguments after the path are parameter
values."""
import json
import os
import sys

from cfnlint.decode import cfn_yaml
from samtranslator.translator.transform import transform


class NoManagedPolicies:
    """The template names no managed policy by name, so nothing is looked
    up in IAM (this runs without a network)."""

    def load(self):
        return {}


def main(path, params):
    # The translator asks for a region to name ARNs; any will do offline.
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    source = json.loads(json.dumps(cfn_yaml.load(path)))
    template = json.loads(json.dumps(source))
    # What `sam package` does before CloudFormation transforms the template:
    # local code becomes an S3 object.
    for name, res in template.get("Resources", {}).items():
        props = res.get("Properties", {})
        if res.get("Type") == "AWS::Serverless::Function" and not str(props.get("CodeUri", "")).startswith("s3://"):
            props["CodeUri"] = f"s3://packaged-code/{name}.zip"
    # Parameter values (NAME=VALUE), as a deploy would give them.
    out = transform(template, params, NoManagedPolicies())
    json.dump({"source": source, "translated": out}, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(
        sys.argv[1] if len(sys.argv) > 1 else "template.yaml",
        dict(a.split("=", 1) for a in sys.argv[2:]),
    )
