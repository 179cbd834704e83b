# coll_tests.cmake — SMPI tests of the collectives (sim/coll/) through `dlsim-smpi coll`.
#
# 1. Alpha-beta exactness on tests/smpi/star8.xml: every GPU on its own SPLITDUPLEX link
#    (β = 10 GB/s, 5 µs) to one switch, so a route has α = 10 µs and distinct pairs never share a
#    link. Expected times, by hand:
#      ring all-reduce        2(P-1)(α + n/(Pβ))
#      ring all-gather        (P-1)(α + (n/P)/β)      (n = the gathered size)
#      ring reduce-scatter    (P-1)(α + (n/P)/β)
#      ring broadcast         (k + P - 2)(α + C/β), k = n/C chunks of C = 524288 B
#    One timed call (back-to-back calls of a rooted operation overlap). dlsim-smpi fails (exit 1)
#    when the simulated time is off by more than --tolerance.
# 2. Correctness with real float data and MPI_SUM for every algorithm, P = 2, 3, 4, 8 (and 5, 13
#    for the algorithms with non-power-of-two paths): rank r contributes r + i at element i, and
#    every output element is compared with its exact value.
set(DL_COLL_PLATFORM ${CMAKE_SOURCE_DIR}/tests/smpi/star8.xml)
# (the driver's shared-malloc block: a 16 GiB buffer of 1 MiB blocks would take more memory
# mappings than Linux allows a process)
set(DL_COLL_CFG --cfg=smpi/simulate-computation:no --cfg=smpi/wtime:0
    --cfg=smpi/barrier:ompi_recursivedoubling --cfg=smpi/shared-malloc-blocksize:1073741824
    --log=root.thres:warning)

# name P op algo bytes expected_us
function(dl_coll_exact name P op algo bytes expect_us)
  add_test(NAME smpi.coll.exact.${name}
    COMMAND ${SMPIRUN} -no-privatize -np ${P} -platform ${DL_COLL_PLATFORM}
            ${CMAKE_BINARY_DIR}/dlsim-smpi coll --op ${op} --coll ${algo} --min-bytes ${bytes}
            --max-bytes ${bytes} --iters 1 --expect-us ${expect_us} --tolerance 0.01 ${DL_COLL_CFG})
  set_tests_properties(smpi.coll.exact.${name} PROPERTIES PASS_REGULAR_EXPRESSION "expect: .*: OK"
                       FAIL_REGULAR_EXPRESSION "FAIL")
endfunction()

# 2·3·(10 + 1e6/1e10 s) = 6 · 110 us
dl_coll_exact(allreduce_ring_p4_4MB 4 allreduce ring 4000000 660)
# 6 · (10 + 1600)
dl_coll_exact(allreduce_ring_p4_64MB 4 allreduce ring 64000000 9660)
# 2·7·(10 + 100)
dl_coll_exact(allreduce_ring_p8_8MB 8 allreduce ring 8000000 1540)
# 2·7·(10 + 0.8): latency-dominated
dl_coll_exact(allreduce_ring_p8_64KB 8 allreduce ring 64000 151.2)
# 7 · (10 + 100)
dl_coll_exact(allgather_ring_p8_8MB 8 allgather ring 8000000 770)
dl_coll_exact(reducescatter_ring_p8_8MB 8 reducescatter ring 8000000 770)
# The tree's pipelines: P = 2 on one node is a chain of two; its 2 pipelines (one per tree) of
# 1 MiB each move in C = 2 chunks of c = 512 KiB, both sharing each link direction, so a chunk
# takes α + c/(β/2) = 10 + 104.8576 us, and C + 2D - 1 = 3 chunk times pass (D = 1)
dl_coll_exact(allreduce_tree_p2_2MiB 2 allreduce tree 2097152 344.5728)
# k = 8 chunks, P = 4: 10 · (10 + 52.4288)
dl_coll_exact(broadcast_ring_p4_4MiB 4 broadcast ring 4194304 624.288)

# Past MPI's int counts: 16 GiB (n = 17179869184 B), where nccl-tests users' sweeps end; messages
# over 1 GiB travel as 1 GiB pieces posted together, which share the route and end together.
# 2·1·(10 + (n/2)/β) = 2 · (10 + 858993.4592) us
dl_coll_exact(allreduce_ring_p2_16GiB 2 allreduce ring 17179869184 1718006.9184)
# 2·7·(10 + (n/8)/β) = 14 · (10 + 214748.3648) us
dl_coll_exact(allreduce_ring_p8_16GiB 8 allreduce ring 17179869184 3006617.1072)
# Rabenseifner on 2 ranks: one halving and one doubling exchange of n/2 each way, as the ring
dl_coll_exact(allreduce_rhd_p2_16GiB 2 allreduce rhd 17179869184 1718006.9184)
# 1·(10 + (n/2)/β)
dl_coll_exact(allgather_ring_p2_16GiB 2 allgather ring 17179869184 859003.4592)
dl_coll_exact(reducescatter_ring_p2_16GiB 2 reducescatter ring 17179869184 859003.4592)
# one pairwise step of n/2 each way
dl_coll_exact(alltoall_pairwise_p2_16GiB 2 alltoall pairwise 17179869184 859003.4592)

# name P op algo [extra smpirun args]
function(dl_coll_check P op algo)
  string(REPLACE ":" "_" tag "${algo}")
  add_test(NAME smpi.coll.check.${op}_${tag}_p${P}
    COMMAND ${SMPIRUN} -no-privatize -np ${P} -platform ${DL_COLL_PLATFORM}
            ${CMAKE_BINARY_DIR}/dlsim-smpi coll --op ${op} --coll ${algo} --check
            --ranks-per-node 2 --min-bytes 4 --max-bytes 2100000 ${DL_COLL_CFG} ${ARGN})
  set_tests_properties(smpi.coll.check.${op}_${tag}_p${P} PROPERTIES
                       PASS_REGULAR_EXPRESSION "check .*: OK" FAIL_REGULAR_EXPRESSION "FAIL")
endfunction()

foreach(P 2 3 4 8)
  foreach(oa allreduce:ring allreduce:tree allreduce:hier allreduce:rhd allgather:ring
             allgather:rhd reducescatter:ring reducescatter:rhd broadcast:ring broadcast:tree
             alltoall:pairwise sendrecv:pairwise)
    string(REPLACE ":" ";" parts "${oa}")
    list(GET parts 0 op)
    list(GET parts 1 algo)
    dl_coll_check(${P} ${op} ${algo})
  endforeach()
  dl_coll_check(${P} allreduce smpi:lr --cfg=smpi/allreduce:lr)
  dl_coll_check(${P} allgather smpi:ring --cfg=smpi/allgather:ring)
  dl_coll_check(${P} reducescatter smpi:ompi_ring --cfg=smpi/reduce_scatter:ompi_ring)
  dl_coll_check(${P} broadcast smpi:binomial_tree --cfg=smpi/bcast:binomial_tree)
  dl_coll_check(${P} alltoall smpi:ring --cfg=smpi/alltoall:ring)
endforeach()
# The trees over 3 nodes of 4 (an odd node count: tree 1 is tree 0 shifted by one node), and over
# 4 nodes of 4 (tree 1 mirrored): 4 channels, 8 pipelines, chunks widened by nothing
dl_coll_check(12 allreduce tree --ranks-per-node 4)
dl_coll_check(16 allreduce tree --ranks-per-node 4)
# Non-powers of two beyond 3, and more ranks than hosts (ranks wrap round the 8 hosts).
foreach(P 5 13)
  foreach(oa allreduce:tree allreduce:rhd allreduce:hier reducescatter:rhd allgather:rhd
             broadcast:tree)
    string(REPLACE ":" ";" parts "${oa}")
    list(GET parts 0 op)
    list(GET parts 1 algo)
    dl_coll_check(${P} ${op} ${algo})
  endforeach()
endforeach()
