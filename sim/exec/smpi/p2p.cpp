// p2p.cpp — what SimGrid's C API does not give: a comm whose payload pointer is handed over as
// it is. Inside smpimain every comm's data goes through SMPI's copy of MPI buffers, which takes
// the comm for an MPI request's; the op lists' own messages (run.c) are not.
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Mailbox.hpp>

extern "C" sg_comm_t dl_p2p_put_async(sg_mailbox_t mailbox, void *payload, long bytes) {
  simgrid::s4u::CommPtr comm = mailbox->put_init(payload, (uint64_t)bytes);
  comm->set_copy_data_callback(simgrid::s4u::Comm::copy_pointer_callback);
  comm->start();
  comm->add_ref(); /* the caller's reference, released by sg_comm_wait */
  return comm.get();
}
