"""moto's server with two answers moto lacks, as AWS gives them (test harness only).

- EC2 DescribeInstanceTopology: the network nodes of instances of the types AWS reports a topology for
  (the families below), three layers, the same for instances that share them as on AWS: the first two
  are the zone's, the third the instance's own. Instances of other types are left out of the answer, as
  AWS leaves them out. Filters and group names are not read.
- ELBv2 DNS names of network load balancers in AWS's shape, `<name>-<16 hex>.elb.<region>.amazonaws.com`
  (moto names them `<name>-1.<region>.elb.amazonaws.com`, the shape of a classic ELB, which clients
  that tell the two apart by the name take for a classic one).
- `access_logs.s3.enabled` = `false` among a new ELBv2 load balancer's attributes, as AWS lists it (moto
  leaves it out), so a client comparing the attributes sees what it would see on AWS.

Run it as moto_server: `python moto_server.py -H 127.0.0.1 -p 5000`.
"""

import hashlib
import re
import sys

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response
from moto.elbv2.models import ELBv2Backend
from moto.server import main

# Instance families with an instance topology on AWS (DescribeInstanceTopology's documented list, by
# prefix).
TOPOLOGY_FAMILIES = re.compile(r"^(p3dn|p4d|p4de|p5|p5e|p5en|p6|trn1|trn1n|trn2|hpc6a|hpc6id|hpc7a|hpc7g|g6|g6e|inf2)\.")
MAX_IDS = 100


def _node(*parts):
    return "nn-" + hashlib.sha256("/".join(parts).encode()).hexdigest()[:17]


def describe_instance_topology(self):
    ids = self._get_param("InstanceIds", [])
    if len(ids) > MAX_IDS:
        raise EC2ClientError("InvalidParameterValue", f"at most {MAX_IDS} instance IDs per request")
    zone_ids = {z.name: z.zone_id for z in self.ec2_backend.describe_availability_zones()}
    out = []
    for inst in self.ec2_backend.all_instances():
        if ids and inst.id not in ids:
            continue
        if inst.state == "terminated" or not TOPOLOGY_FAMILIES.match(inst.instance_type):
            continue
        zone = inst._placement.zone
        out.append(
            {
                "InstanceId": inst.id,
                "InstanceType": inst.instance_type,
                "NetworkNodes": [_node(zone, "1"), _node(zone, "2"), _node(zone, inst.id)],
                "AvailabilityZone": zone,
                "ZoneId": zone_ids.get(zone, ""),
            }
        )
    return ActionResult({"Instances": out})


EC2Response.describe_instance_topology = describe_instance_topology

_create_load_balancer = ELBv2Backend.create_load_balancer


def create_load_balancer(self, *args, **kwargs):
    lb = _create_load_balancer(self, *args, **kwargs)
    lb.attrs.setdefault("access_logs.s3.enabled", "false")
    if lb.type == "network":
        suffix = hashlib.sha256(lb.arn.encode()).hexdigest()[:16]
        lb.dns_name = f"{lb.name}-{suffix}.elb.{self.region_name}.amazonaws.com"
    return lb


ELBv2Backend.create_load_balancer = create_load_balancer

if __name__ == "__main__":
    sys.exit(main())
